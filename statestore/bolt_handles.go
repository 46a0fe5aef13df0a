package statestore

import "iter"

// The bbolt backend's state handles: those of handles.go over a boltTable.
// Values live in the cache, which snapshots never share (they read the
// file), so nothing is copied on write; a handle marks an entry dirty
// whenever it takes a slot for writing (upsert, writableSlot, remove, merge).

type boltValue[T any] struct{ *boltTable[T] }

func (s *boltValue[T]) Get(key, ns string) (T, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero T
		return zero, false
	}
	return p.v, true
}

func (s *boltValue[T]) Put(key, ns string, v T) {
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = v
	}
}

func (s *boltValue[T]) Delete(key, ns string) { s.remove(key, ns) }

type boltList[T any] struct{ *boltTable[[]T] }

func (s *boltList[T]) Get(key, ns string) []T {
	p := s.readSlot(key, ns)
	if p == nil {
		return nil
	}
	return p.v[:len(p.v):len(p.v)]
}

func (s *boltList[T]) Add(key, ns string, v T) {
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = append(p.v, v)
	}
}

func (s *boltList[T]) AddAll(key, ns string, vs []T) {
	if len(vs) == 0 {
		return
	}
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = append(p.v, vs...)
	}
}

func (s *boltList[T]) Update(key, ns string, vs []T) {
	if len(vs) == 0 {
		s.remove(key, ns)
		return
	}
	if p, _ := s.upsert(key, ns); p != nil {
		p.v = append([]T(nil), vs...)
	}
}

func (s *boltList[T]) MergeNamespaces(key, target string, sources ...string) {
	s.merge(key, target, sources, func(acc []T, _ bool, src []T) []T { return append(acc, src...) })
}

type boltMap[K comparable, V any] struct {
	*boltTable[map[K]mapItem[V]]
}

func (s *boltMap[K, V]) Get(key, ns string, k K) (V, bool) {
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
		now := s.b.clock()
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

func (s *boltMap[K, V]) Contains(key, ns string, k K) bool {
	_, ok := s.Get(key, ns, k)
	return ok
}

func (s *boltMap[K, V]) Put(key, ns string, k K, v V) {
	p, _ := s.upsert(key, ns)
	if p == nil {
		return
	}
	if p.v == nil {
		p.v = make(map[K]mapItem[V])
	}
	p.v[k] = mapItem[V]{V: v, TS: s.now()}
}

func (s *boltMap[K, V]) Delete(key, ns string, k K) {
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

// Iterate pins the key's entry while the loop runs, so that the map it
// ranges over is the one the body's deletions change.
func (s *boltMap[K, V]) Iterate(key, ns string) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		e := s.entry(key)
		if e == nil {
			return
		}
		i := e.find(ns)
		if i < 0 {
			return
		}
		e.pins++
		defer func() { e.pins-- }()
		m := s.value(e, i).v
		now := s.now()
		for k, it := range m {
			if s.spec.ttl > 0 && now-it.TS >= s.spec.ttl {
				continue
			}
			if !yield(k, it.V) {
				return
			}
		}
	}
}

func (s *boltMap[K, V]) Len(key, ns string) int {
	p := s.lookup(key, ns)
	if p == nil {
		return 0
	}
	if s.fn.count == nil {
		return len(p.v)
	}
	a, _ := s.fn.count(p.v, s.b.clock())
	return a
}

type boltReducing[T any] struct {
	*boltTable[T]
	reduce func(acc, v T) T
}

func (s *boltReducing[T]) Get(key, ns string) (T, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero T
		return zero, false
	}
	return p.v, true
}

func (s *boltReducing[T]) Add(key, ns string, v T) {
	p, fresh := s.upsert(key, ns)
	switch {
	case p == nil:
	case fresh:
		p.v = v
	default:
		p.v = s.reduce(p.v, v)
	}
}

func (s *boltReducing[T]) MergeNamespaces(key, target string, sources ...string) {
	s.merge(key, target, sources, func(acc T, have bool, src T) T {
		if !have {
			return src
		}
		return s.reduce(acc, src)
	})
}

type boltAggregating[IN, ACC, OUT any] struct {
	*boltTable[ACC]
	d AggregatingDescriptor[IN, ACC, OUT]
}

func (s *boltAggregating[IN, ACC, OUT]) Get(key, ns string) (OUT, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero OUT
		return zero, false
	}
	return s.d.Result(p.v), true
}

func (s *boltAggregating[IN, ACC, OUT]) Accumulator(key, ns string) (ACC, bool) {
	p := s.readSlot(key, ns)
	if p == nil {
		var zero ACC
		return zero, false
	}
	return p.v, true
}

func (s *boltAggregating[IN, ACC, OUT]) Add(key, ns string, in IN) {
	p, fresh := s.upsert(key, ns)
	if p == nil {
		return
	}
	if fresh && s.d.Create != nil {
		p.v = s.d.Create()
	}
	p.v = s.d.Add(p.v, in)
}

func (s *boltAggregating[IN, ACC, OUT]) MergeNamespaces(key, target string, sources ...string) {
	s.merge(key, target, sources, func(acc ACC, have bool, src ACC) ACC {
		if !have {
			return src
		}
		return s.d.Merge(acc, src)
	})
}
