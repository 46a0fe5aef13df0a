package statestore

import "errors"

// Sentinel errors of package statestore; test with errors.Is. Returned errors
// wrap them with what was being done (state name, key group).
var (
	// ErrCorrupt marks a snapshot blob that cannot be trusted: a CRC32-C
	// mismatch, a truncated blob, a bad magic number or malformed CBOR.
	ErrCorrupt = errors.New("corrupt state blob")

	// ErrUnsupportedVersion marks a blob written by a newer format version.
	ErrUnsupportedVersion = errors.New("unsupported state blob version")

	// ErrUnknownState marks a lookup of a state name that is not registered.
	ErrUnknownState = errors.New("unknown state")

	// ErrIncompatibleState marks a state name registered (or restored) with
	// another kind or Go type, or restored data that does not decode into the
	// descriptor's type.
	ErrIncompatibleState = errors.New("incompatible state")

	// ErrInvalidDescriptor marks a descriptor with no name or a missing
	// function (Reduce, Add, Merge, Result).
	ErrInvalidDescriptor = errors.New("invalid state descriptor")

	// ErrInvalidOptions marks backend Options that cannot work (no
	// KeyGroupFunc, an empty key-group range).
	ErrInvalidOptions = errors.New("invalid state backend options")

	// ErrKeyGroupRange marks a key, timer or blob whose key group lies outside
	// the backend's range: a routing bug, or a KeyGroupFunc (max_parallelism)
	// that differs from the one the state was written with.
	ErrKeyGroupRange = errors.New("key group outside the backend's range")

	// ErrDuplicateKeyGroup marks a Restore that hands the same key group twice.
	ErrDuplicateKeyGroup = errors.New("key group restored twice")

	// ErrClosed marks use of a closed backend.
	ErrClosed = errors.New("state backend closed")
)
