package pipeline

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/eddy-stream/eddy/statestore"
)

// SubtaskInfo identifies one parallel instance of a source, step or sink.
type SubtaskInfo struct {
	// ID is the source, step or sink id of the pipeline file.
	ID             string
	Subtask        int
	Parallelism    int
	MaxParallelism int
	// PipelineName is the pipeline's `name`.
	PipelineName string
	Logger       *slog.Logger
	Metrics      *Metrics
}

// Emitter receives the output of an operator. Emit may change the records and
// reorder the slice while it runs; the caller must not use the slice's contents
// after Emit returns, and the callee must not keep the slice (it may keep the
// records). Emit is called on the task goroutine.
type Emitter interface {
	Emit(batch []Record) error
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func([]Record) error

// Emit calls f.
func (f EmitterFunc) Emit(b []Record) error { return f(b) }

// OperatorContext is what a step's operator gets at Open.
type OperatorContext struct {
	SubtaskInfo
	// Errors applies the step's on_error policy to a failed record.
	Errors *ErrorHandler
	// Side returns the emitter of a side output stream declared by the step
	// (see SideOutputs); records emitted there go to the steps and sinks that
	// read "<step>.<name>" or the declared stream id.
	Side func(name string) Emitter
	// Now returns the processing time in epoch ms.
	Now func() int64
	// WakeAt asks for a call of OnProcessingTime once the processing time
	// reaches t (epoch ms). Only the earliest pending request is kept per
	// operator: an operator asks again for its next timer when called.
	WakeAt func(t int64)
	// KeyedState returns the operator's keyed state backend, created on the
	// first call: the state and timers of the key groups this subtask owns.
	// The runtime snapshots, restores and closes it; operators register
	// their states and timer service on it in Open.
	KeyedState func() (statestore.Backend, error)
}

// ProcessingTimeHandler is implemented by operators with processing-time
// timers (processing-time windows, early firings). OnProcessingTime is called
// on the task goroutine at or after the time last passed to WakeAt.
type ProcessingTimeHandler interface {
	OnProcessingTime(now int64, out Emitter) error
}

// Operator is the runtime instance of a step on one subtask. All methods are
// called on the task goroutine, so an operator needs no locks.
type Operator interface {
	// Open is called once before any input.
	Open(ctx context.Context, oc *OperatorContext) error
	// Process handles a batch of records and emits results to out. It may
	// change the records in place and reuse the input slice for its output.
	Process(in []Record, out Emitter) error
	// Close is called once when the task ends, whether it succeeded or failed.
	Close() error
}

// MultiInputOperator is implemented by the operators of steps whose inputs
// differ (a join's left and right): the runtime calls ProcessInput with the
// index of the input (in StepSpec.Inputs) the records came from, instead of
// Process. Such a step always heads its task (it is never chained).
type MultiInputOperator interface {
	Operator
	ProcessInput(input int, in []Record, out Emitter) error
}

// WatermarkHandler is implemented by operators that act on event time.
// OnWatermark is called on the task goroutine when the task's input watermark
// advances, before the watermark is forwarded downstream.
type WatermarkHandler interface {
	OnWatermark(wm int64, out Emitter) error
}

// IdleHandler is implemented by sinks that pass event time on (group
// mode's exchange writer): OnIdle is called on the task goroutine when the
// task tells its receivers that it is idle, until the next OnWatermark or
// Write says otherwise.
type IdleHandler interface {
	OnIdle() error
}

// WatermarkHolder is implemented by operators that emit records behind
// their input watermark: an outer interval join emits a record's padded
// row, with the record's time, only once the watermark passed that time by
// the join's bound. WatermarkHold returns by how much (ms, >= 0) the
// watermark the operator's output carries stays behind its input's, so
// that such rows are not late downstream (Flink's interval join holds its
// output watermark back the same way). Only a chain's head may hold: the
// runtime calls OnWatermark of the head with its input watermark, and of
// the nodes after it, and downstream tasks, with the held one.
type WatermarkHolder interface {
	WatermarkHold() int64
}

// Finisher is implemented by operators that hold records back. Finish is
// called on the task goroutine once all inputs ended, after the final
// watermark; it emits what is left before end-of-input goes downstream.
type Finisher interface {
	Finish(out Emitter) error
}

// SourceContext is what a source gets at Open.
type SourceContext struct {
	SubtaskInfo
	// Restored is the source's position from a checkpoint, or nil to start
	// fresh (or when the source restores at another parallelism: see
	// RestoredAll).
	Restored []byte
	// RestoredAll holds the positions of every subtask of the restored
	// checkpoint, by the subtask index they had, when the source config is
	// Rescalable and the checkpoint was taken at another parallelism: the
	// source takes from them what it owns now (Kafka: its partitions). The
	// entry of a subtask that had no position yet (it was checkpointed
	// before it read anything) is nil, as Restored is then.
	RestoredAll [][]byte
	// Position may be set by Open to the position the source starts from
	// when that is not Restored (a rescaled restore, or the offsets a fresh
	// start resolved): a checkpoint taken before the first Read returns
	// stores it. Nil keeps Restored.
	Position []byte
	// Splits may be set by Open to the splits (ReadBatch.Split values) the
	// subtask reads from the start, e.g. its Kafka partitions: each holds
	// the watermark back until it has records, ends or goes idle, even
	// before it delivered anything. Splits not declared count from their
	// first record.
	Splits []int
	// SplitTimes may be set by Open to the largest event time each
	// declared split delivered before: its watermark starts as if it had
	// read that record again, so a split with nothing more to read does
	// not hold the watermark back behind where it was (group mode, where a
	// partition moves between processes).
	SplitTimes map[int]int64
	// Stdin is the job's standard input (JobOptions.Stdin), which the
	// stdin source reads; nil: the process's (os.Stdin).
	Stdin io.Reader
}

// SourceCheckpointListener is implemented by sources that act when a
// checkpoint completes (the Kafka source commits its offsets to the
// consumer group for lag monitoring). CheckpointComplete is called on the
// task goroutine, concurrently with Read, with the position the subtask
// had at barrier id. An error is logged; it does not fail the job.
type SourceCheckpointListener interface {
	CheckpointComplete(ctx context.Context, id int64, position []byte) error
}

// ReadBatch is filled by Source.Read.
type ReadBatch struct {
	// Records read, appended by Read.
	Records []Record
	// Position is the encoded position after the last record of Records,
	// what Open's Restored gets back after a restore. Nil for sources that
	// cannot replay (stdin, socket).
	Position []byte
	// Split is the index of the split (file, partition) the records came
	// from; watermarks are generated per split.
	Split int
	// SplitDone says the split ended after these records: it no longer
	// holds the source's watermark back.
	SplitDone bool
	// Watermark, when HasWatermark is set, is the source's watermark
	// after these records, for a source without event_time whose input
	// carries watermarks of its own (group mode's exchange reader, whose
	// records keep the event time they were sent with): the task advances
	// to it, then goes idle when Idle is set. Sources with event_time leave
	// it unset: the runtime generates their watermarks.
	Watermark    int64
	HasWatermark bool
	Idle         bool
	// Failed holds input that could not be decoded into records, in read
	// order; each one's At places it among Records. The runtime applies the
	// source's on_error policy to each (fail, skip, or dead_letter to
	// "<source>.errors") in that order: with fail, the records read before
	// the bad input still go downstream.
	Failed []FailedRecord
	// KeyFailed holds records whose key failed before they were read,
	// with the key's error: group mode's exchange reader reads them from
	// partition 0 of its topic, where the sending process put them
	// because the keyed step it feeds has on_error: dead_letter. The
	// runtime applies the on_error policy of each keyed step the source
	// feeds (the step's, as its hash partitioning does to a key that
	// fails), after Records: under dead_letter the record goes, as a dead
	// letter, to the step's errors stream, as it goes to the step's
	// subtask 0 in one process.
	KeyFailed []KeyFailure
}

// KeyFailure is a record whose key failed and the error, "key_by: ...".
type KeyFailure struct {
	Record Record
	Err    error
}

// FailedRecord is input a source could not turn into a record.
type FailedRecord struct {
	// Fields describe the input for the dead letter, e.g. {"raw": line}.
	Fields map[string]any
	// Err says where and why, e.g. "data.jsonl:3: invalid JSON: ...".
	Err error
	// At is the index in ReadBatch.Records of the first record read after
	// this input (len(Records) when it was appended): the runtime emits
	// Records[:At] before it applies on_error to this input.
	At int
}

// Source is the runtime instance of a source on one subtask. Open and Close
// are called on the source task goroutine; Read is called on a dedicated
// reader goroutine, one call at a time, so a Read that blocks never stalls
// checkpoints or shutdown.
type Source interface {
	Open(ctx context.Context, sc *SourceContext) error
	// Read blocks until it appended at least one record or failed record to
	// b, advanced its position (b.Position, b.SplitDone), the input ended
	// (io.EOF, with or without records), or ctx is done (ctx.Err()). It must
	// return promptly once ctx is done.
	Read(ctx context.Context, b *ReadBatch) error
	Close(ctx context.Context) error
}

// SinkContext is what a sink gets at Open.
type SinkContext struct {
	SubtaskInfo
	// Committables are what this subtask's PreCommit returned for the
	// checkpoint the run restores from (TwoPhaseCommitSink only; nil on a
	// fresh start). Open must commit them (Commit is idempotent) and abort
	// whatever else it finds pending or in progress from earlier runs.
	Committables [][]byte
	// Checkpointing is true when the pipeline takes checkpoints: a
	// TwoPhaseCommitSink writes transactionally only then.
	Checkpointing bool
	// Checkpoint is the pipeline's checkpoint block (nil without one) and
	// RestartDelay the longest wait of its restart strategy: a
	// transactional sink checks that its transactions outlive a checkpoint
	// plus a restart.
	Checkpoint   *CheckpointSpec
	RestartDelay time.Duration
	// Changelog is the sink's `changelog` setting: with upsert, the rows of
	// a changelog stream (field _op) arrive without retractions (-U), so a
	// keyed sink can write +I/+U as the key's value and -D as its deletion.
	Changelog Changelog
	// Stdout is the job's standard output (JobOptions.Stdout), which the
	// stdout sink writes; nil: the process's (os.Stdout).
	Stdout io.Writer
}

// Sink is the runtime instance of a sink on one subtask. All methods are
// called on the task goroutine.
type Sink interface {
	Open(ctx context.Context, sc *SinkContext) error
	// Write takes a batch of records; it may buffer them until Flush.
	Write(ctx context.Context, batch []Record) error
	// Flush makes everything written so far durable or visible as far as the
	// sink can; it runs at checkpoint barriers and at the end of input.
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// TwoPhaseCommitSink is a sink whose output becomes visible through one
// transaction per checkpoint: what it writes between two
// barriers is pre-committed at the second and committed once that
// checkpoint is complete. Found by type assertion on a Sink.
type TwoPhaseCommitSink interface {
	Sink
	// PreCommit is called on the task goroutine at checkpoint barrier id,
	// after Flush: it makes everything written since the previous barrier
	// durable but not yet visible, and returns a small committable that
	// goes into the checkpoint. Writing goes on in a new transaction.
	PreCommit(ctx context.Context, checkpointID int64) ([]byte, error)
	// Commit makes pre-committed transactions visible. It is called on the
	// task goroutine when a checkpoint completes (with the committables of
	// that checkpoint and earlier ones not yet committed), and at Open for
	// the restored ones; committing twice must be harmless.
	Commit(ctx context.Context, committables [][]byte) error
}

// CheckpointAbortListener is implemented by sources, operators and sinks
// that act when a checkpoint is aborted (it failed, timed out or was
// subsumed before completing: Flink's notifyCheckpointAborted).
// CheckpointAborted is called on the task goroutine; an error is logged and
// does not fail the job. A 2PC sink's pre-committed transaction of an
// aborted checkpoint is not lost: the next completed checkpoint's Commit
// includes it.
type CheckpointAbortListener interface {
	CheckpointAborted(ctx context.Context, id int64) error
}

// Guarantee is the delivery guarantee a component supports end to end.
type Guarantee int

const (
	AtMostOnce Guarantee = iota
	AtLeastOnce
	ExactlyOnce
)

func (g Guarantee) String() string {
	switch g {
	case AtLeastOnce:
		return "at-least-once"
	case ExactlyOnce:
		return "exactly-once"
	}
	return "at-most-once"
}

// SplitStatuser is implemented by sources that can tell where each of their
// splits stands (the Kafka source: each partition's offset, lag and
// idleness), for the run's status (Runner.Status). SplitStatus is called
// from other goroutines while Read runs, and after Open only: it must be
// safe for that and cheap (no I/O: it reports what the source last knew).
type SplitStatuser interface {
	SplitStatus() []SplitStatus
}
