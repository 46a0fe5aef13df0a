package statestore

import (
	"fmt"
	"iter"
	"time"
)

// Values are held as Go values. Treat what a Get returns as immutable: store
// a changed value with Put (or return a new one from Reduce/Add/Merge), or
// set the descriptor's Copy function so that the backend can copy a value
// before a function changes it in place (snapshots share unchanged values
// with the live state). Values are encoded with CBOR in snapshots, so their
// exported fields (or cbor tags) must describe them.

// ValueDescriptor describes a ValueState: one value of type T per (key, ns).
type ValueDescriptor[T any] struct {
	Name     string
	TTL      time.Duration // 0: entries never expire
	UpdateOn TTLUpdate
	// Copy deep-copies a value; nil copies by assignment. Only needed when T
	// holds references that are changed in place after a Put.
	Copy func(T) T
}

// ValueState holds one value per (key, ns).
type ValueState[T any] interface {
	State
	Get(key, ns string) (T, bool)
	Put(key, ns string, v T)
	Delete(key, ns string)
}

// ListDescriptor describes a ListState: a list of T per (key, ns). A TTL
// applies to the list as a whole.
type ListDescriptor[T any] struct {
	Name     string
	TTL      time.Duration
	UpdateOn TTLUpdate
}

// ListState holds a list per (key, ns). It merges namespaces by concatenation.
type ListState[T any] interface {
	State
	// Get returns the list, nil when empty. The caller must not change its
	// elements; appending to it is safe (its capacity is clipped).
	Get(key, ns string) []T
	Add(key, ns string, v T)
	AddAll(key, ns string, vs []T)
	// Update replaces the list by a copy of vs; an empty vs clears it.
	Update(key, ns string, vs []T)
	MergeNamespaces(key, target string, sources ...string)
}

// MapDescriptor describes a MapState: a map K -> V per (key, ns). A TTL
// applies to each map entry on its own.
type MapDescriptor[K comparable, V any] struct {
	Name     string
	TTL      time.Duration
	UpdateOn TTLUpdate
}

// MapState holds a map per (key, ns).
type MapState[K comparable, V any] interface {
	State
	Get(key, ns string, k K) (V, bool)
	Put(key, ns string, k K, v V)
	Delete(key, ns string, k K)
	Contains(key, ns string, k K) bool
	// Iterate yields the unexpired entries of the map of (key, ns) in
	// unspecified order. The body may delete the entry it is given.
	Iterate(key, ns string) iter.Seq2[K, V]
	// Len returns the number of unexpired entries of the map of (key, ns).
	Len(key, ns string) int
}

// ReducingDescriptor describes a ReducingState: the values added to a
// (key, ns) folded into one with Reduce.
type ReducingDescriptor[T any] struct {
	Name string
	// Reduce combines the current value and a new one. Required.
	Reduce   func(acc, v T) T
	TTL      time.Duration
	UpdateOn TTLUpdate
	Copy     func(T) T
}

// ReducingState folds the values added per (key, ns).
type ReducingState[T any] interface {
	State
	Get(key, ns string) (T, bool)
	Add(key, ns string, v T)
	MergeNamespaces(key, target string, sources ...string)
}

// AggregatingDescriptor describes an AggregatingState: inputs IN folded into
// an accumulator ACC per (key, ns), read as OUT. It is what incremental window
// aggregates use; MergeNamespaces merges session windows.
type AggregatingDescriptor[IN, ACC, OUT any] struct {
	Name string
	// Create returns a new accumulator; nil starts from ACC's zero value.
	Create func() ACC
	// Add folds one input into the accumulator and returns it. Required.
	Add func(acc ACC, in IN) ACC
	// Merge combines two accumulators. Required.
	Merge func(a, b ACC) ACC
	// Result turns an accumulator into the output. Required.
	Result   func(acc ACC) OUT
	TTL      time.Duration
	UpdateOn TTLUpdate
	// Copy deep-copies an accumulator; set it when Add or Merge change an
	// accumulator in place (a pointer, slice or map ACC).
	Copy func(ACC) ACC
}

// AggregatingState folds inputs into an accumulator per (key, ns).
type AggregatingState[IN, ACC, OUT any] interface {
	State
	// Get returns Result of the accumulator.
	Get(key, ns string) (OUT, bool)
	// Accumulator returns the accumulator itself (treat it as immutable).
	Accumulator(key, ns string) (ACC, bool)
	Add(key, ns string, in IN)
	// MergeNamespaces merges the accumulators of sources into target's (like
	// Flink's InternalMergingState) and deletes the sources.
	MergeNamespaces(key, target string, sources ...string)
}

// stateSpec is what every descriptor has in common.
type stateSpec struct {
	name         string
	kind         Kind
	ttl          int64 // milliseconds; 0: no TTL
	updateOnRead bool
}

func newSpec(name string, kind Kind, ttl time.Duration, upd TTLUpdate) (stateSpec, error) {
	if name == "" {
		return stateSpec{}, fmt.Errorf("%w: %s state has no name", ErrInvalidDescriptor, kind)
	}
	if ttl < 0 {
		return stateSpec{}, fmt.Errorf("%w: state %q: negative TTL %v", ErrInvalidDescriptor, name, ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	return stateSpec{name: name, kind: kind, ttl: ms, updateOnRead: ms > 0 && upd == OnReadAndWrite}, nil
}

// RegisterValue registers a ValueState on b, or returns the one already
// registered under d.Name (ErrIncompatibleState if its kind or type differs).
// Called on the task goroutine, typically when the operator opens.
func RegisterValue[T any](b Backend, d ValueDescriptor[T]) (ValueState[T], error) {
	spec, err := newSpec(d.Name, KindValue, d.TTL, d.UpdateOn)
	if err != nil {
		return nil, err
	}
	return registerState(b, spec, tableFuncs[T]{copy: d.Copy}, func(s slots[T]) ValueState[T] {
		return &valueHandle[T]{s}
	})
}

// RegisterList registers a ListState; see RegisterValue.
func RegisterList[T any](b Backend, d ListDescriptor[T]) (ListState[T], error) {
	spec, err := newSpec(d.Name, KindList, d.TTL, d.UpdateOn)
	if err != nil {
		return nil, err
	}
	return registerState(b, spec, tableFuncs[[]T]{}, func(s slots[[]T]) ListState[T] {
		return &listHandle[T]{s}
	})
}

// RegisterMap registers a MapState; see RegisterValue.
func RegisterMap[K comparable, V any](b Backend, d MapDescriptor[K, V]) (MapState[K, V], error) {
	spec, err := newSpec(d.Name, KindMap, d.TTL, d.UpdateOn)
	if err != nil {
		return nil, err
	}
	return registerState(b, spec, mapTableFuncs[K, V](spec.ttl), func(s slots[map[K]mapItem[V]]) MapState[K, V] {
		return &mapHandle[K, V]{s}
	})
}

// RegisterReducing registers a ReducingState; see RegisterValue.
func RegisterReducing[T any](b Backend, d ReducingDescriptor[T]) (ReducingState[T], error) {
	spec, err := newSpec(d.Name, KindReducing, d.TTL, d.UpdateOn)
	if err != nil {
		return nil, err
	}
	if d.Reduce == nil {
		return nil, fmt.Errorf("%w: reducing state %q has no Reduce", ErrInvalidDescriptor, d.Name)
	}
	return registerState(b, spec, tableFuncs[T]{copy: d.Copy}, func(s slots[T]) ReducingState[T] {
		return &reducingHandle[T]{slots: s, reduce: d.Reduce}
	})
}

// RegisterAggregating registers an AggregatingState; see RegisterValue.
func RegisterAggregating[IN, ACC, OUT any](b Backend, d AggregatingDescriptor[IN, ACC, OUT]) (AggregatingState[IN, ACC, OUT], error) {
	spec, err := newSpec(d.Name, KindAggregating, d.TTL, d.UpdateOn)
	if err != nil {
		return nil, err
	}
	if d.Add == nil || d.Merge == nil || d.Result == nil {
		return nil, fmt.Errorf("%w: aggregating state %q needs Add, Merge and Result", ErrInvalidDescriptor, d.Name)
	}
	return registerState(b, spec, tableFuncs[ACC]{copy: d.Copy}, func(s slots[ACC]) AggregatingState[IN, ACC, OUT] {
		return &aggregatingHandle[IN, ACC, OUT]{slots: s, d: d}
	})
}
