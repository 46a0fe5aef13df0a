package statestore

import (
	"iter"
	"maps"
)

// The memory backend's state handles. Each embeds its table, which provides
// Name, Kind, Clear, Namespaces and Keys.

type memValue[T any] struct{ *table[T] }

func (s *memValue[T]) Get(key, ns string) (T, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero T
		return zero, false
	}
	return p.v, true
}

func (s *memValue[T]) Put(key, ns string, v T) {
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = v
	}
}

func (s *memValue[T]) Delete(key, ns string) { s.remove(key, ns) }

type memList[T any] struct{ *table[[]T] }

func (s *memList[T]) Get(key, ns string) []T {
	p := s.readSlot(key, ns)
	if p == nil {
		return nil
	}
	return p.v[:len(p.v):len(p.v)]
}

// Appending is safe although a snapshot may share the backing array: a list
// only ever grows past the length a snapshot saw, or is replaced.

func (s *memList[T]) Add(key, ns string, v T) {
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = append(p.v, v)
	}
}

func (s *memList[T]) AddAll(key, ns string, vs []T) {
	if len(vs) == 0 {
		return
	}
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = append(p.v, vs...)
	}
}

func (s *memList[T]) Update(key, ns string, vs []T) {
	if len(vs) == 0 {
		s.remove(key, ns)
		return
	}
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = append([]T(nil), vs...)
	}
}

func (s *memList[T]) MergeNamespaces(key, target string, sources ...string) {
	s.merge(key, target, sources, func(acc []T, _ bool, src []T) []T { return append(acc, src...) })
}

// mapItem is one entry of a MapState's map; TS is its TTL time.
type mapItem[V any] struct {
	_  struct{} `cbor:",toarray"`
	V  V
	TS int64
}

func mapTableFuncs[K comparable, V any](ttl int64) tableFuncs[map[K]mapItem[V]] {
	fn := tableFuncs[map[K]mapItem[V]]{copy: maps.Clone[map[K]mapItem[V]]}
	if ttl == 0 {
		fn.restored = func(m map[K]mapItem[V], _ int64) (map[K]mapItem[V], bool) {
			for k, it := range m {
				if it.TS != 0 { // written with a TTL, which this state no longer has
					it.TS = 0
					m[k] = it
				}
			}
			return m, len(m) > 0
		}
		return fn
	}
	fn.count = func(m map[K]mapItem[V], now int64) (alive, expired int) {
		for _, it := range m {
			if now-it.TS >= ttl {
				expired++
			} else {
				alive++
			}
		}
		return alive, expired
	}
	fn.purge = func(m map[K]mapItem[V], now int64) int {
		n := 0
		for k, it := range m {
			if now-it.TS >= ttl {
				delete(m, k)
				n++
			}
		}
		return n
	}
	fn.filter = func(m map[K]mapItem[V], now int64) map[K]mapItem[V] {
		c := make(map[K]mapItem[V], len(m))
		for k, it := range m {
			if now-it.TS < ttl {
				c[k] = it
			}
		}
		return c
	}
	fn.restored = func(m map[K]mapItem[V], now int64) (map[K]mapItem[V], bool) {
		for k, it := range m {
			switch {
			case it.TS == 0: // written without a TTL: its TTL starts now
				it.TS = now
				m[k] = it
			case now-it.TS >= ttl:
				delete(m, k)
			}
		}
		return m, len(m) > 0
	}
	return fn
}

type memMap[K comparable, V any] struct {
	*table[map[K]mapItem[V]]
}

func (s *memMap[K, V]) Get(key, ns string, k K) (V, bool) {
	var zero V
	p := s.lookup(key, ns)
	if p == nil {
		return zero, false
	}
	it, ok := p.v[k]
	if !ok {
		return zero, false
	}
	if s.spec.ttl > 0 {
		now := s.m.clock()
		if now-it.TS >= s.spec.ttl {
			s.Delete(key, ns, k)
			return zero, false
		}
		if s.spec.updateOnRead {
			p = s.writableSlot(key, ns)
			it.TS = now
			p.v[k] = it
		}
	}
	return it.V, true
}

func (s *memMap[K, V]) Contains(key, ns string, k K) bool {
	_, ok := s.Get(key, ns, k)
	return ok
}

func (s *memMap[K, V]) Put(key, ns string, k K, v V) {
	p, _ := s.upsert(key, ns)
	if p == nil {
		return
	}
	if p.v == nil {
		p.v = make(map[K]mapItem[V])
	}
	p.v[k] = mapItem[V]{V: v, TS: s.now()}
}

func (s *memMap[K, V]) Delete(key, ns string, k K) {
	p := s.lookup(key, ns)
	if p == nil {
		return
	}
	if _, ok := p.v[k]; !ok {
		return
	}
	if len(p.v) == 1 {
		s.remove(key, ns)
		return
	}
	delete(s.writableSlot(key, ns).v, k)
}

func (s *memMap[K, V]) Iterate(key, ns string) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		p := s.lookup(key, ns)
		if p == nil {
			return
		}
		now := s.now()
		// p.v stays valid while the body deletes: a write either changes
		// this map in place (allowed during range) or a copy of it.
		for k, it := range p.v {
			if s.spec.ttl > 0 && now-it.TS >= s.spec.ttl {
				continue
			}
			if !yield(k, it.V) {
				return
			}
		}
	}
}

func (s *memMap[K, V]) Len(key, ns string) int {
	p := s.lookup(key, ns)
	if p == nil {
		return 0
	}
	if s.fn.count == nil {
		return len(p.v)
	}
	a, _ := s.fn.count(p.v, s.m.clock())
	return a
}

type memReducing[T any] struct {
	*table[T]
	reduce func(acc, v T) T
}

func (s *memReducing[T]) Get(key, ns string) (T, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero T
		return zero, false
	}
	return p.v, true
}

func (s *memReducing[T]) Add(key, ns string, v T) {
	p, fresh := s.upsert(key, ns)
	switch {
	case p == nil:
	case fresh:
		p.v = v
	default:
		p.v = s.reduce(p.v, v)
	}
}

func (s *memReducing[T]) MergeNamespaces(key, target string, sources ...string) {
	s.merge(key, target, sources, func(acc T, have bool, src T) T {
		if !have {
			return src
		}
		return s.reduce(acc, src)
	})
}

type memAggregating[IN, ACC, OUT any] struct {
	*table[ACC]
	d AggregatingDescriptor[IN, ACC, OUT]
}

func (s *memAggregating[IN, ACC, OUT]) Get(key, ns string) (OUT, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero OUT
		return zero, false
	}
	return s.d.Result(p.v), true
}

func (s *memAggregating[IN, ACC, OUT]) Accumulator(key, ns string) (ACC, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero ACC
		return zero, false
	}
	return p.v, true
}

func (s *memAggregating[IN, ACC, OUT]) Add(key, ns string, in IN) {
	p, fresh := s.upsert(key, ns)
	if p == nil {
		return
	}
	if fresh && s.d.Create != nil {
		p.v = s.d.Create()
	}
	p.v = s.d.Add(p.v, in)
}

func (s *memAggregating[IN, ACC, OUT]) MergeNamespaces(key, target string, sources ...string) {
	s.merge(key, target, sources, func(acc ACC, have bool, src ACC) ACC {
		if !have {
			return src
		}
		return s.d.Merge(acc, src)
	})
}
