package statestore

import (
	"fmt"
	"io"
	"iter"
	"time"
)

// KeyGroupFunc maps a canonical key to its key group, 0..maxParallelism-1
// (hash(key) mod max_parallelism). It must be pure: the same key
// always maps to the same group, in every run and at every parallelism, or
// restored state would land in the wrong subtask. A restore calls it from
// several goroutines at once.
type KeyGroupFunc func(key string) int

// Options configure a backend.
type Options struct {
	// KeyGroup computes a key's key group. Required.
	KeyGroup KeyGroupFunc
	// KeyGroups is the range [start, end) of key groups this backend owns
	// (one subtask's share). Required; 0 <= start < end.
	KeyGroups [2]int
	// Clock returns the processing time in epoch milliseconds, read for TTL
	// only. Default: the wall clock. Tests inject a fake one.
	Clock func() int64
	// Incremental makes SnapshotCheckpoint take deltas on the snapshot of
	// the last completed checkpoint (checkpoint.incremental): the backend
	// then keeps track of what its writes change (docs/state.md,
	// "Incremental checkpoints").
	Incremental bool
	// Changelog, with Incremental, says that the deltas are appended to a
	// changelog that holds the state they apply to (group mode's changelog
	// topics), not chained into checkpoint parts that a restore merges: a
	// snapshot is a delta on the base however many deltas and bytes
	// follow the chain's last full snapshot.
	Changelog bool
}

func (o *Options) validate() error {
	if o.KeyGroup == nil {
		return fmt.Errorf("%w: KeyGroup is required", ErrInvalidOptions)
	}
	if o.KeyGroups[0] < 0 || o.KeyGroups[1] <= o.KeyGroups[0] {
		return fmt.Errorf("%w: key-group range [%d, %d) is empty", ErrInvalidOptions, o.KeyGroups[0], o.KeyGroups[1])
	}
	if o.Clock == nil {
		o.Clock = func() int64 { return time.Now().UnixMilli() }
	}
	return nil
}

// Backend holds the keyed state and the timers of one operator subtask.
//
// Every method, and every state handle and TimerService it returns, is called
// from the subtask's task goroutine only; nothing here takes a lock. The one
// exception is the Snapshot that Snapshot returns, which encodes on any
// goroutine.
//
// Handles are created with the Register* functions (RegisterValue,
// RegisterList, RegisterMap, RegisterReducing, RegisterAggregating), which
// take the backend and a descriptor. The interface is sealed: only this
// package implements it, so that those generic functions can build handles
// for each implementation.
//
// State accessors return no error: a backend that fails (a key outside the
// range, later a disk error in the bbolt backend) records the first failure,
// which Err, Snapshot and Restore then return. The task checks Err after each
// batch and fails the subtask, which restarts from the last checkpoint.
type Backend interface {
	// KeyGroupRange returns the key groups [start, end) this backend owns.
	KeyGroupRange() (start, end int)

	// State returns the registered state called name, for the operations
	// that need no Go type (Clear, Keys, Namespaces). Unknown names wrap
	// ErrUnknownState.
	State(name string) (State, error)

	// StateNames lists the registered states, sorted.
	StateNames() []string

	// TimerService returns the timer service called name, creating it on
	// first use; Restore fills it with the timers of the restored key
	// groups. One per operator, named after it.
	TimerService(name string) *TimerService

	// Clear deletes the value of (key, ns) in every registered state: what a
	// window operator does when a window's state is dropped.
	Clear(key, ns string)

	// Cleanup deletes every entry whose TTL has expired and returns how many
	// it deleted. Expired entries are never returned by reads anyway; Cleanup
	// frees their memory. Called by the task, e.g. on a processing-time timer
	// or after a checkpoint.
	Cleanup() (int, error)

	// Snapshot captures the state and timers of every key group, on the task
	// goroutine, without blocking on I/O: it costs O(states × key groups +
	// timers) and the backend can be mutated as soon as it returns (the memory
	// backend copies a key group, then a key, on its first write after the
	// snapshot). The returned Snapshot encodes on any goroutine. Snapshot
	// returns the backend's sticky error, if any.
	Snapshot() (Snapshot, error)

	// Restore loads blobs written by Snapshot.WriteTo (split by SplitBlobs), by
	// backends of any parallelism, as long as they use the same KeyGroupFunc.
	// Every blob must belong to a key group of this backend's range
	// (ErrKeyGroupRange; BlobKeyGroup and SplitBlobs help select them) and
	// each key group may be restored once (ErrDuplicateKeyGroup). All blobs
	// are verified (CRC32-C, format) and decoded before any is applied, so a
	// failed Restore changes nothing. Called on the task goroutine before
	// processing starts. States registered before Restore are decoded at
	// once; the others are kept as CBOR and decoded when registered.
	Restore(blobs ...[]byte) error

	// Err returns the first failure of a state accessor, or nil.
	Err() error

	// Close releases the backend; later calls return ErrClosed.
	Close() error

	// sealed keeps implementations inside this package.
	sealed()
}

// State is what every state handle shares, whatever its Go types.
type State interface {
	// Name returns the state's registered name.
	Name() string
	// Kind returns the state's kind.
	Kind() Kind
	// Clear deletes the state's value for (key, ns).
	Clear(key, ns string)
	// Namespaces yields the namespaces that hold an unexpired value for key.
	// The body may delete the namespace it is given; the order is unspecified.
	Namespaces(key string) iter.Seq[string]
	// Keys yields the keys of key group group that hold an unexpired value in
	// some namespace (none for a group outside the backend's range). The body
	// may modify the state; keys it adds may or may not be yielded. The
	// order is unspecified.
	Keys(group int) iter.Seq[string]
}

// Kind is the kind of a state. Its numeric value is part of the snapshot format.
type Kind uint8

// The state kinds.
const (
	KindValue       Kind = 1
	KindList        Kind = 2
	KindMap         Kind = 3
	KindReducing    Kind = 4
	KindAggregating Kind = 5
)

func (k Kind) String() string {
	switch k {
	case KindValue:
		return "value"
	case KindList:
		return "list"
	case KindMap:
		return "map"
	case KindReducing:
		return "reducing"
	case KindAggregating:
		return "aggregating"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k Kind) valid() bool { return k >= KindValue && k <= KindAggregating }

// TTLUpdate says which accesses restart an entry's time to live.
type TTLUpdate uint8

const (
	// OnCreateAndWrite restarts the TTL when the entry is created or written
	// (Put, Add, Update, Merge). The default.
	OnCreateAndWrite TTLUpdate = iota
	// OnReadAndWrite also restarts it when the entry is read.
	OnReadAndWrite
)

// Snapshot is the captured state of a backend. Its methods may run on any
// goroutine (the checkpoint's asynchronous part) while the backend keeps being
// mutated; a Snapshot itself is used by one goroutine at a time.
type Snapshot interface {
	// KeyGroupRange returns the key groups [start, end) the snapshot covers.
	KeyGroupRange() (start, end int)
	// WriteTo writes the blob of every key group that holds state or
	// timers, in key-group order, back to back, one Write each; empty key
	// groups have no blob, and entries whose TTL expired when the snapshot
	// was taken are left out. SplitBlobs splits such a stream again.
	WriteTo(w io.Writer) (int64, error)
	// WriteAndRelease is WriteTo followed by Release (also on an error),
	// except that the snapshot lets go of each key group as soon as the
	// group's blob is encoded rather than at the end: the memory backend's
	// heap no longer holds the values the task has replaced in it since,
	// and, while no other snapshot lives, the task's writes to it stop
	// copying.
	WriteAndRelease(w io.Writer) (int64, error)
	// Release frees what the snapshot holds, and lets the backend write in
	// place what only the snapshot shared (the memory backend's writes stop
	// copying). The snapshot is unusable after; calling Release again does
	// nothing.
	Release()
}

// IncrementalBackend is a backend whose checkpoint snapshots can be deltas
// on the snapshot of the last checkpoint that completed (both backends,
// with Options.Incremental; docs/state.md, "Incremental checkpoints").
// Without Options.Incremental, SnapshotCheckpoint is Snapshot and
// CheckpointCompleted does nothing. Both methods run on the task
// goroutine.
type IncrementalBackend interface {
	Backend
	// SnapshotCheckpoint is Snapshot for checkpoint id. The snapshot is a
	// DeltaSnapshot; its Base tells whether it is a delta.
	SnapshotCheckpoint(id int64) (Snapshot, error)
	// CheckpointCompleted tells that checkpoint id completed: its snapshot
	// may be the base of the next ones.
	CheckpointCompleted(id int64)
}

// DeltaSnapshot is a snapshot of an IncrementalBackend. Its blobs are
// delta blobs when Base is not 0: written as a delta part on the part of
// checkpoint Base (checkpoint.Writer.Create with a base).
type DeltaSnapshot interface {
	Snapshot
	// Base returns the checkpoint whose snapshot this one is a delta on,
	// or 0 when it is full.
	Base() int64
	// Full makes the snapshot a full one (Base returns 0): the fallback
	// when the base's part cannot be used. Call it before writing.
	Full()
}
