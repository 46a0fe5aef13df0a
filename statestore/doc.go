// Package statestore holds eddy's keyed state: the Backend that every stateful
// operator (windows, dedupe, continuous aggregates, joins, user state) reads
// and writes on its task goroutine, the typed state handles (ValueState,
// ListState, MapState, ReducingState, AggregatingState) created from
// descriptors, the per-operator TimerService, and the snapshot format that
// checkpoints and savepoints store (docs/state.md specifies it byte by byte).
//
// State is sharded into key groups: every key belongs to one key
// group, computed by the KeyGroupFunc the caller injects, and a subtask's
// backend owns a contiguous range [start, end) of them. A snapshot is encoded
// one blob per key group, so a savepoint taken at parallelism p restores at
// parallelism q by handing each new subtask the blobs of its range.
//
// Threading: a Backend, its state handles and its timer services belong to one
// goroutine, the task's, and take no locks. Snapshot captures
// on that goroutine in O(states × key groups + timers); the returned Snapshot
// encodes on any other goroutine while the task keeps mutating the backend
// (copy-on-write per key group and per key).
//
// Backends: Memory (the heap, copy-on-write snapshots) and Bolt (live state
// in a bbolt file with a bounded write-back cache, snapshots from a bbolt read
// transaction; bolt.go). The Backend interface is sealed (it has an
// unexported method) so that the Register* functions can build typed handles
// for each implementation inside this package; a backend is added here
// without changing operators.
//
// Dependencies: statestore imports only the standard library,
// github.com/fxamacker/cbor/v2, go.etcd.io/bbolt and internal/prefetch. It
// must not import any other of eddy's packages (pipeline, operators,
// connectors, checkpoint, cmd): the runtime, the checkpoint storage and the
// operators import statestore, never the other way round.
package statestore
