package pipeline

import "errors"

// Sentinel errors of package pipeline; test with errors.Is.
var (
	// ErrInvalid marks an invalid pipeline file; the CLI exits 2.
	ErrInvalid = errors.New("invalid pipeline")
	// ErrBadKey is returned for a key value that cannot be encoded.
	ErrBadKey = errors.New("bad key")
	// ErrRecordFailed wraps a record error under on_error: fail.
	ErrRecordFailed = errors.New("record failed")
	// ErrRestore is returned when a checkpoint cannot be restored into the
	// pipeline as it is now.
	ErrRestore = errors.New("cannot restore")
	// ErrNoCheckpoints is returned for a savepoint of a job whose pipeline
	// has no checkpoint block.
	ErrNoCheckpoints = errors.New("the pipeline has no checkpoint block")
	// ErrJobEnding is returned for a savepoint requested once the job ends
	// or takes its final checkpoint.
	ErrJobEnding = errors.New("the job is ending")
)
