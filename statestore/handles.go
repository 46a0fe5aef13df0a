package statestore

import (
	"fmt"
	"iter"
	"maps"
)

// The state handles, one implementation for both backends over slots: the
// value of a (state, key, namespace) read, created, written, deleted,
// merged, or pinned for an iteration. A handle reaches its backend's table
// through a branch, not an interface, and allocates nothing per access.

// slots is a state's storage as its handle sees it: the table of the memory
// backend (mem) or of the bbolt backend (bolt), exactly one of them set.
// Each method does what the table's method of the same role does (see
// table's), returning the slot's value. A pointer it returns is valid until
// the next write to the state; the value behind one from lookup or read
// must not be written.
type slots[S any] struct {
	mem  *table[S]
	bolt *boltTable[S]
	spec stateSpec
}

// registerState registers the state spec on b with the handle wrap makes of
// its slots, or returns the handle already registered under its name.
// fn.copy only serves the memory backend, whose snapshots share values with
// the live state.
func registerState[S, H any](b Backend, spec stateSpec, fn tableFuncs[S], wrap func(slots[S]) H) (H, error) {
	switch be := b.(type) {
	case *Memory:
		return register(be, spec, fn, func(t *table[S]) H { return wrap(slots[S]{mem: t, spec: spec}) })
	case *Bolt:
		fn.copy = nil // the cache is never shared with a snapshot
		return registerBolt(be, spec, fn, func(t *boltTable[S]) H { return wrap(slots[S]{bolt: t, spec: spec}) })
	}
	var zero H
	return zero, fmt.Errorf("register state %q: backend %T not supported", spec.name, b)
}

// Name, Kind, Clear, Namespaces and Keys implement State for every handle.

func (s *slots[S]) Name() string         { return s.spec.name }
func (s *slots[S]) Kind() Kind           { return s.spec.kind }
func (s *slots[S]) Clear(key, ns string) { s.remove(key, ns) }

func (s *slots[S]) Namespaces(key string) iter.Seq[string] {
	if s.mem != nil {
		return s.mem.Namespaces(key)
	}
	return s.bolt.Namespaces(key)
}

func (s *slots[S]) Keys(group int) iter.Seq[string] {
	if s.mem != nil {
		return s.mem.Keys(group)
	}
	return s.bolt.Keys(group)
}

// clock returns the backend's time in milliseconds.
func (s *slots[S]) clock() int64 {
	if s.mem != nil {
		return s.mem.m.clock()
	}
	return s.bolt.b.clock()
}

// now reads the clock when the state has a TTL, and returns 0 otherwise.
func (s *slots[S]) now() int64 {
	if s.spec.ttl > 0 {
		return s.clock()
	}
	return 0
}

// lookup returns the value of (key, ns) for reading, or nil, whether its
// TTL ran out or not.
func (s *slots[S]) lookup(key, ns string) *S {
	if s.mem != nil {
		if p := s.mem.lookup(key, ns); p != nil {
			return &p.v
		}
		return nil
	}
	if p := s.bolt.lookup(key, ns); p != nil {
		return &p.v
	}
	return nil
}

// read returns the value of (key, ns) at a read access, or nil when it is
// absent or expired; see table.readSlot.
func (s *slots[S]) read(key, ns string) *S {
	if s.mem != nil {
		if p := s.mem.readSlot(key, ns); p != nil {
			return &p.v
		}
		return nil
	}
	if p := s.bolt.readSlot(key, ns); p != nil {
		return &p.v
	}
	return nil
}

// upsert returns the writable value of (key, ns), creating it; fresh
// reports one that is new or had expired (it then holds the zero value).
// It returns nil for a key outside the backend's range (the failure is
// recorded).
func (s *slots[S]) upsert(key, ns string) (v *S, fresh bool) {
	if s.mem != nil {
		p, fresh := s.mem.upsert(key, ns)
		if p == nil {
			return nil, false
		}
		return &p.v, fresh
	}
	p, fresh := s.bolt.upsert(key, ns)
	if p == nil {
		return nil, false
	}
	return &p.v, fresh
}

// writable returns the writable value of an existing (key, ns), or nil.
func (s *slots[S]) writable(key, ns string) *S {
	if s.mem != nil {
		if p := s.mem.writableSlot(key, ns); p != nil {
			return &p.v
		}
		return nil
	}
	if p := s.bolt.writableSlot(key, ns); p != nil {
		return &p.v
	}
	return nil
}

// remove deletes (key, ns).
func (s *slots[S]) remove(key, ns string) {
	if s.mem != nil {
		s.mem.remove(key, ns)
		return
	}
	s.bolt.remove(key, ns)
}

// merge folds the unexpired values of sources into target with fold (have
// says whether acc holds target's value yet) and deletes the sources.
func (s *slots[S]) merge(key, target string, sources []string, fold func(acc S, have bool, src S) S) {
	if s.mem != nil {
		s.mem.merge(key, target, sources, fold)
		return
	}
	s.bolt.merge(key, target, sources, fold)
}

// pin returns the value of (key, ns) for an iteration over it, or nil; the
// caller releases the pin when the iteration ends. While pinned, the value
// is the one that the body's writes to (key, ns) change (in place or, in
// the memory backend, in a copy, leaving the value ranged over intact).
func (s *slots[S]) pin(key, ns string) (*S, pinned) {
	if s.mem != nil {
		if p := s.mem.lookup(key, ns); p != nil {
			return &p.v, pinned{}
		}
		return nil, pinned{}
	}
	return s.bolt.pin(key, ns)
}

// pinned holds a bbolt cache entry in the cache until released (see
// boltTable.pin); the zero pinned holds nothing.
type pinned struct{ pins *int }

func (p pinned) release() {
	if p.pins != nil {
		*p.pins--
	}
}

type valueHandle[T any] struct{ slots[T] }

func (h *valueHandle[T]) Get(key, ns string) (T, bool) {
	p := h.read(key, ns)
	if p == nil {
		var zero T
		return zero, false
	}
	return *p, true
}

func (h *valueHandle[T]) Put(key, ns string, v T) {
	if p, _ := h.upsert(key, ns); p != nil {
		*p = v
	}
}

func (h *valueHandle[T]) Delete(key, ns string) { h.remove(key, ns) }

type listHandle[T any] struct{ slots[[]T] }

func (h *listHandle[T]) Get(key, ns string) []T {
	p := h.read(key, ns)
	if p == nil {
		return nil
	}
	return (*p)[:len(*p):len(*p)]
}

// Appending is safe although a memory snapshot may share the backing array:
// a list only ever grows past the length a snapshot saw, or is replaced.

func (h *listHandle[T]) Add(key, ns string, v T) {
	if p, _ := h.upsert(key, ns); p != nil {
		*p = append(*p, v)
	}
}

func (h *listHandle[T]) AddAll(key, ns string, vs []T) {
	if len(vs) == 0 {
		return
	}
	if p, _ := h.upsert(key, ns); p != nil {
		*p = append(*p, vs...)
	}
}

func (h *listHandle[T]) Update(key, ns string, vs []T) {
	if len(vs) == 0 {
		h.remove(key, ns)
		return
	}
	if p, _ := h.upsert(key, ns); p != nil {
		*p = append([]T(nil), vs...)
	}
}

func (h *listHandle[T]) MergeNamespaces(key, target string, sources ...string) {
	h.merge(key, target, sources, func(acc []T, _ bool, src []T) []T { return append(acc, src...) })
}

// mapItem is one entry of a MapState's map; TS is its TTL time.
type mapItem[V any] struct {
	_  struct{} `cbor:",toarray"`
	V  V
	TS int64
}

// countMapItems returns the numbers of entries of m alive and expired at
// now under TTL ttl (> 0).
func countMapItems[K comparable, V any](m map[K]mapItem[V], now, ttl int64) (alive, expired int) {
	for _, it := range m {
		if now-it.TS >= ttl {
			expired++
		} else {
			alive++
		}
	}
	return alive, expired
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
		return countMapItems(m, now, ttl)
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

// mapHandle keeps a map per slot; its TTL applies to each map entry on its
// own (the slots themselves have none).
type mapHandle[K comparable, V any] struct {
	slots[map[K]mapItem[V]]
}

func (h *mapHandle[K, V]) Get(key, ns string, k K) (V, bool) {
	var zero V
	p := h.lookup(key, ns)
	if p == nil {
		return zero, false
	}
	it, ok := (*p)[k]
	if !ok {
		return zero, false
	}
	if h.spec.ttl > 0 {
		now := h.clock()
		if now-it.TS >= h.spec.ttl {
			h.Delete(key, ns, k)
			return zero, false
		}
		if h.spec.updateOnRead {
			it.TS = now
			(*h.writable(key, ns))[k] = it
		}
	}
	return it.V, true
}

func (h *mapHandle[K, V]) Contains(key, ns string, k K) bool {
	_, ok := h.Get(key, ns, k)
	return ok
}

func (h *mapHandle[K, V]) Put(key, ns string, k K, v V) {
	p, _ := h.upsert(key, ns)
	if p == nil {
		return
	}
	if *p == nil {
		*p = make(map[K]mapItem[V])
	}
	(*p)[k] = mapItem[V]{V: v, TS: h.now()}
}

func (h *mapHandle[K, V]) Delete(key, ns string, k K) {
	p := h.lookup(key, ns)
	if p == nil {
		return
	}
	if _, ok := (*p)[k]; !ok {
		return
	}
	if len(*p) == 1 {
		h.remove(key, ns)
		return
	}
	delete(*h.writable(key, ns), k)
}

func (h *mapHandle[K, V]) Iterate(key, ns string) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		p, pinned := h.pin(key, ns)
		if p == nil {
			return
		}
		defer pinned.release()
		m := *p
		now := h.now()
		for k, it := range m {
			if h.spec.ttl > 0 && now-it.TS >= h.spec.ttl {
				continue
			}
			if !yield(k, it.V) {
				return
			}
		}
	}
}

func (h *mapHandle[K, V]) Len(key, ns string) int {
	p := h.lookup(key, ns)
	if p == nil {
		return 0
	}
	if h.spec.ttl == 0 {
		return len(*p)
	}
	a, _ := countMapItems(*p, h.clock(), h.spec.ttl)
	return a
}

type reducingHandle[T any] struct {
	slots[T]
	reduce func(acc, v T) T
}

func (h *reducingHandle[T]) Get(key, ns string) (T, bool) {
	p := h.read(key, ns)
	if p == nil {
		var zero T
		return zero, false
	}
	return *p, true
}

func (h *reducingHandle[T]) Add(key, ns string, v T) {
	p, fresh := h.upsert(key, ns)
	switch {
	case p == nil:
	case fresh:
		*p = v
	default:
		*p = h.reduce(*p, v)
	}
}

func (h *reducingHandle[T]) MergeNamespaces(key, target string, sources ...string) {
	h.merge(key, target, sources, func(acc T, have bool, src T) T {
		if !have {
			return src
		}
		return h.reduce(acc, src)
	})
}

type aggregatingHandle[IN, ACC, OUT any] struct {
	slots[ACC]
	d AggregatingDescriptor[IN, ACC, OUT]
}

func (h *aggregatingHandle[IN, ACC, OUT]) Get(key, ns string) (OUT, bool) {
	p := h.read(key, ns)
	if p == nil {
		var zero OUT
		return zero, false
	}
	return h.d.Result(*p), true
}

func (h *aggregatingHandle[IN, ACC, OUT]) Accumulator(key, ns string) (ACC, bool) {
	p := h.read(key, ns)
	if p == nil {
		var zero ACC
		return zero, false
	}
	return *p, true
}

func (h *aggregatingHandle[IN, ACC, OUT]) Add(key, ns string, in IN) {
	p, fresh := h.upsert(key, ns)
	if p == nil {
		return
	}
	if fresh && h.d.Create != nil {
		*p = h.d.Create()
	}
	*p = h.d.Add(*p, in)
}

func (h *aggregatingHandle[IN, ACC, OUT]) MergeNamespaces(key, target string, sources ...string) {
	h.merge(key, target, sources, func(acc ACC, have bool, src ACC) ACC {
		if !have {
			return src
		}
		return h.d.Merge(acc, src)
	})
}
