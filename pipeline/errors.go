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

// SinkRecordError is what a Sink's Write returns for a record it cannot
// write because of the record itself (a value its format cannot encode,
// such as an infinite float in JSON), as opposed to the sink failing.
// Index is the record's index in the batch: the records before it were
// written as usual, the ones after it were not. The runtime flushes the
// records before it, then fails the task with an error that names the
// sink and the record's position in the sink's input.
type SinkRecordError struct {
	Index int
	Err   error
}

func (e *SinkRecordError) Error() string { return e.Err.Error() }

func (e *SinkRecordError) Unwrap() error { return e.Err }
