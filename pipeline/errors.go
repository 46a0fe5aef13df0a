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
	// ErrStopping is returned by a Runner asked to stop, or to take a
	// savepoint, once a stop was asked already.
	ErrStopping = errors.New("the pipeline is stopping already")
	// ErrRestarting is returned by a Runner asked for a savepoint while no
	// job runs: it waits to restart after a failure (or has not started).
	ErrRestarting = errors.New("the pipeline is waiting to restart after a failure: try again once it runs")
)
