package checkpoint

import "errors"

// Sentinel errors of the checkpoint storage (checkpoint.go); test with
// errors.Is. They live here rather than in errors.go only because this file
// belongs to the checkpoint storage; they are the same package's sentinels.
var (
	// ErrNoCheckpoint marks a store that holds no completed checkpoint at
	// all (incomplete leftovers do not count), or a lookup of a checkpoint id
	// that is not a completed checkpoint of the store. Starting fresh is
	// right only in the first case.
	ErrNoCheckpoint = errors.New("no completed checkpoint")

	// ErrNoValidCheckpoint marks a store whose completed checkpoints all fail
	// verification. The error says which were tried and why; the caller must
	// not silently start fresh.
	ErrNoValidCheckpoint = errors.New("no valid checkpoint")

	// ErrCorrupt marks a checkpoint or savepoint that cannot be
	// trusted: a CRC32-C mismatch, a missing or unlisted part, a size that
	// differs from the metadata, undecodable metadata.
	ErrCorrupt = errors.New("corrupt checkpoint")

	// ErrFormat marks a checkpoint file written by a newer format
	// version, or a file that is not an eddy checkpoint store or savepoint.
	ErrFormat = errors.New("unsupported checkpoint file format")

	// ErrStateDirLocked marks a checkpoint store that another process (or
	// another Store of this one) holds open.
	ErrStateDirLocked = errors.New("state dir locked")

	// ErrID marks a Begin with an id that is not positive, is being
	// written already, or is not greater than the newest completed checkpoint.
	ErrID = errors.New("invalid checkpoint id")

	// ErrFinished marks a Put, Create or Complete on a
	// pending checkpoint that was completed, aborted or failed already.
	ErrFinished = errors.New("pending checkpoint already finished")

	// ErrFailed marks a Complete of a pending checkpoint one of
	// whose writes failed; it wraps that first failure too. Abort it.
	ErrFailed = errors.New("checkpoint write failed")

	// ErrDuplicatePart marks a second Put of the same part name.
	ErrDuplicatePart = errors.New("part written twice")

	// ErrPartNotFound marks a Get of a part the checkpoint does not have.
	ErrPartNotFound = errors.New("no such checkpoint part")

	// ErrInvalidPart marks a Put with an empty or too long part name, or a
	// blob too large for one bbolt value.
	ErrInvalidPart = errors.New("invalid checkpoint part")

	// ErrDeltaBase marks a Create with a base whose base cannot carry a delta
	// part: it is not a completed checkpoint of the store (or not older
	// than the pending one), it has no part of that name, or retention has
	// deleted it. The caller writes the part whole instead (Create). A
	// Complete that finds a base gone fails with it too.
	ErrDeltaBase = errors.New("no such base for a delta part")

	// ErrClosed marks use of a closed Store or Checkpoint.
	ErrClosed = errors.New("checkpoint store closed")
)
