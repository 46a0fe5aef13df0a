package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/eddy-stream/eddy/checkpoint"
)

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Logger  *slog.Logger
	Metrics *Metrics
	// StateDir is the pipeline's state directory (`eddy run`: state.dir or
	// --state-dir, plus the pipeline name). With a checkpoint block it
	// holds the checkpoint store and is required; without one, state.backend
	// bbolt keeps its live files under it (JobOptions.StateDir).
	StateDir string
	// Fresh discards the pipeline's checkpoints before the run, which then
	// starts from the beginning. The caller asks the user first.
	Fresh bool
	// FromSavepoint is the path of a savepoint file to restore from instead
	// of the latest checkpoint. Run imports it into the store first, as a
	// checkpoint with an id after every other.
	FromSavepoint string
	// AllowNonRestoredState lets a restore drop the state of steps that are
	// no longer in the pipeline; without it such a restore fails.
	AllowNonRestoredState bool
	// OnStart, if set, is called on Run's goroutine each time a job started,
	// with the attempt: 1 for the first job, 2 for the first restart. The
	// job runs meanwhile; OnStart must not block for long.
	OnStart func(attempt int)
	// OnRunning, if set, is called once the attempt's job opened every
	// task (Job.Opened): its keyed state restored, its sinks, steps and
	// sources open. It is called on a goroutine of its own, after OnStart
	// of the same attempt and before the job's end is handled (so before
	// the next attempt's OnStart, and before Run returns); not for a job
	// that fails before (a restore that fails in a task, a source that
	// cannot open). `eddy run` tells systemd READY=1 from it.
	OnRunning func(attempt int)
	// Stdin and Stdout are the job's standard streams (JobOptions.Stdin,
	// JobOptions.Stdout); nil: the process's.
	Stdin  io.Reader
	Stdout io.Writer
}

// RunState is where a run stands: one of the first four while Run runs,
// one of the others once it returned.
type RunState int

const (
	// RunStarting: Run was not called, or its first job has not started.
	RunStarting RunState = iota
	// RunRunning: a job runs.
	RunRunning
	// RunStopping: a job runs and was asked to stop, or a stop came while
	// no job ran.
	RunStopping
	// RunRestarting: a job failed and Run waits for the restart delay.
	RunRestarting
	// RunFinished: the input of every source ended; Run returned nil.
	RunFinished
	// RunStopped: the run was stopped (Stop, StopWithSavepoint,
	// StopWithoutCheckpoint, ctx); Run returned nil.
	RunStopped
	// RunCancelled: Cancel ended the run; Run returned an error.
	RunCancelled
	// RunFailed: a job failed and the restart strategy did not restart it;
	// Run returned its error.
	RunFailed
	// RunAborted: Run returned without a job ending the run: it could not
	// open the checkpoint store or its restore point, a job could not start
	// or restart, or a stop came while it waited to restart. Run logged why.
	RunAborted
)

var runStates = []string{"starting", "running", "stopping", "restarting", "finished", "stopped", "cancelled", "failed", "aborted"}

func (s RunState) String() string { return nameOf(s, runStates, "RunState") }

// Ended reports whether s is the state of a run whose last job ended it
// (finished, stopped, cancelled or failed).
func (s RunState) Ended() bool { return s >= RunFinished && s <= RunFailed }

// stopKind is how a run was asked to stop.
type stopKind int

const (
	notStopped       stopKind = iota
	stopDrain                 // graceful, with a final checkpoint (if any)
	stopSavepoint             // graceful, the final checkpoint taken as a savepoint
	stopNoCheckpoint          // at once, without a final checkpoint; not a failure
	stopCancel                // at once; the run is cancelled
)

// Runner runs a pipeline the way `eddy run` does: it owns the job's
// lifecycle. Run opens the checkpoint store and chooses the restore point
// (the latest valid checkpoint, or an imported savepoint), starts the job,
// restarts it after a failure as the restart block says, and closes the
// store. Stop, StopWithSavepoint, StopWithoutCheckpoint and Cancel end the
// run; TriggerSavepoint takes a savepoint while it runs.
//
// A Runner runs once. Its methods other than Run are safe from any
// goroutine (the CLI's signal handling, the admin endpoint's handlers).
type Runner struct {
	spec    *Spec
	opts    RunnerOptions
	logger  *slog.Logger
	metrics *Metrics
	// wake receives a stop or cancel that came while no job ran.
	wake chan struct{}

	mu       sync.Mutex
	plan     *Plan // of the current (or last) attempt
	job      *Job  // of the current attempt; nil between attempts
	attempts int
	stop     stopKind
	// finalJob is the job that accepted a stop with savepoint.
	finalJob *Job
	ended    RunState // set once Run returned
	// restored is the id of the checkpoint the first attempt restored
	// (0: none); set by Run before the first job starts.
	restored int64
	// startedAt and endedAt are when Run was called and returned; lastErr
	// is the error of the last failed job, or of the run (Status).
	startedAt, endedAt time.Time
	lastErr            string
	// sampler holds the totals the status's rates are computed from.
	sampler statusSampler
	// groupStop, in group mode, ends the run's membership of the group
	// (group_run.go).
	groupStop context.CancelFunc
	// group is what a group run reports (Status).
	group *groupReport
}

// NewRunner compiles spec and returns its runner; nothing runs or is
// opened until Run. spec must be valid (Load validates it).
func NewRunner(spec *Spec, opts RunnerOptions) (*Runner, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if spec.Group != nil && opts.StateDir == "" {
		return nil, fmt.Errorf("pipeline %q: group mode needs a state directory", spec.Name)
	}
	if spec.Checkpoint == nil && (opts.Fresh || opts.FromSavepoint != "") {
		return nil, fmt.Errorf("pipeline %q: a fresh start or a restore from a savepoint needs a checkpoint block", spec.Name)
	}
	if spec.Checkpoint != nil && opts.StateDir == "" {
		return nil, fmt.Errorf("pipeline %q: the checkpoint block needs a state directory", spec.Name)
	}
	plan, err := Compile(spec)
	if err != nil {
		return nil, err
	}
	return &Runner{spec: spec, opts: opts, logger: opts.Logger, metrics: opts.Metrics,
		wake: make(chan struct{}, 1), plan: plan}, nil
}

// Plan returns the plan of the current attempt (each restart compiles the
// spec again), or of the last one once Run returned. Safe from any
// goroutine; the CLI reads it for the run's summary once Run returned.
func (r *Runner) Plan() *Plan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plan
}

// Restored returns the id of the checkpoint (or imported savepoint) the
// run's first job restored, or 0 when it started from the beginning. Safe
// from any goroutine; the CLI reads it once Run returned.
func (r *Runner) Restored() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restored
}

// Run runs the pipeline until its input ends, it is stopped, or it fails
// for good, restarting it after a failure as the restart block says.
// Cancelling ctx stops the run as Stop does; ctx also bounds opening the
// checkpoint store. It returns nil when the run
// finished or was stopped, and otherwise why it did not (State says
// which); it logs its lifecycle (the restore point, restarts, why it could
// not start or restart) to RunnerOptions.Logger. Called once, on the
// caller's goroutine.
func (r *Runner) Run(ctx context.Context) error {
	defer context.AfterFunc(ctx, func() { _ = r.Stop() })()
	r.mu.Lock()
	r.startedAt = time.Now()
	r.mu.Unlock()
	stopSampler, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		r.runSampler(stopSampler)
	}()
	defer func() {
		close(stopSampler)
		<-sampled
	}()
	if r.spec.Group != nil {
		return r.runGroup(ctx)
	}
	opts := JobOptions{Logger: r.logger, Metrics: r.metrics, AllowNonRestoredState: r.opts.AllowNonRestoredState,
		StateDir: r.opts.StateDir, Stdin: r.opts.Stdin, Stdout: r.opts.Stdout}
	if r.spec.Checkpoint != nil {
		store, restore, next, err := openCheckpoints(ctx, r.logger, r.spec, r.opts)
		if err != nil {
			r.logger.Error("cannot start", "err", err)
			return r.end(RunAborted, err)
		}
		defer func() { _ = store.Close(context.WithoutCancel(ctx)) }()
		opts.Store, opts.FirstCheckpointID = store, next
		if restore != nil {
			defer func() { _ = restore.Close() }()
			opts.Restore = restore
			r.mu.Lock()
			r.restored = restore.ID()
			r.mu.Unlock()
		}
		return r.runAttempts(ctx, opts, store)
	}
	return r.runAttempts(ctx, opts, nil)
}

// runAttempts runs the job, restarting it after each failure as the restart
// policy allows; store is nil without a checkpoint block.
func (r *Runner) runAttempts(ctx context.Context, opts JobOptions, store *checkpoint.Store) error {
	policy := NewRestartPolicy(r.spec.Restart)
	plan := r.Plan()
	for attempt := 1; ; attempt++ {
		job, err := Start(ctx, plan, opts)
		if err != nil {
			r.logger.Error("pipeline failed to start", "err", err)
			return r.end(RunAborted, err)
		}
		r.started(ctx, job)
		if r.opts.OnStart != nil {
			r.opts.OnStart(attempt)
		}
		watched := r.watchOpened(job, attempt)
		runErr := job.Wait()
		<-watched
		stop, finalSavepoint := r.jobEnded()
		if stop == stopNoCheckpoint && errors.Is(runErr, context.Canceled) {
			runErr = nil // the stop asked for
		}
		if finalSavepoint && runErr == nil {
			sp, err := job.FinalSavepoint()
			if err != nil {
				runErr = fmt.Errorf("%w (the final checkpoint is in the store: eddy checkpoints export writes it as a savepoint)", err)
			} else {
				r.logger.Info("stopped with a savepoint", "checkpoint", sp.ID, "path", sp.Path)
			}
		}
		switch {
		case stop == stopCancel:
			if runErr == nil {
				runErr = context.Canceled
			}
			return r.end(RunCancelled, runErr)
		case runErr == nil && stop != notStopped:
			return r.end(RunStopped, nil)
		case runErr == nil:
			return r.end(RunFinished, nil)
		case stop != notStopped:
			return r.end(RunFailed, runErr)
		}
		// A failure: restart from the latest checkpoint if the strategy allows.
		delay, why := policy.Next(time.Now())
		if why != nil {
			if r.spec.Restart.Strategy != "none" {
				r.logger.Error("not restarting", "reason", why.Error())
			}
			return r.end(RunFailed, runErr)
		}
		r.metrics.Restarted()
		r.failed(runErr)
		r.logger.Warn("pipeline failed: restarting from the latest checkpoint", "err", runErr.Error(), "restart", attempt, "delay", delay)
		select {
		case <-time.After(delay):
		case <-r.wake:
			r.logger.Info("not restarting: stopped while waiting to restart")
			return r.end(RunAborted, fmt.Errorf("stopped while waiting to restart after: %w", runErr))
		}
		if store != nil {
			if opts, err = restartOptions(ctx, opts, store); err != nil {
				r.logger.Error("cannot restart", "err", err)
				return r.end(RunAborted, err)
			}
		}
		if plan, err = Compile(r.spec); err != nil {
			r.logger.Error("cannot restart", "err", err)
			return r.end(RunAborted, err)
		}
		r.mu.Lock()
		r.plan = plan
		r.mu.Unlock()
	}
}

// started records the job of a new attempt, and applies a stop that came
// before the first job started.
func (r *Runner) started(ctx context.Context, job *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job, r.finalJob = job, nil
	r.attempts++
	switch r.stop {
	case stopDrain:
		job.Stop()
	case stopNoCheckpoint, stopCancel:
		job.Cancel()
	}
}

// watchOpened calls OnRunning, on a goroutine of its own, once job opened
// every task, and nothing when its tasks ended without (one failed to
// open). The channel it returns is closed once that goroutine is done
// (at once without OnRunning).
func (r *Runner) watchOpened(job *Job, attempt int) <-chan struct{} {
	done := make(chan struct{})
	if r.opts.OnRunning == nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		select {
		case <-job.Opened():
		case <-job.tasksEnded:
			select {
			case <-job.Opened(): // opened, then ended at once
			default:
				return
			}
		}
		r.opts.OnRunning(attempt)
	}()
	return done
}

// jobEnded records that the attempt's job ended, and says how it was asked
// to stop and whether it accepted a stop with savepoint.
func (r *Runner) jobEnded() (stopKind, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	final := r.finalJob != nil && r.finalJob == r.job
	r.job = nil
	return r.stop, final
}

// end records how Run ended and returns err.
func (r *Runner) end(state RunState, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended, r.endedAt = state, time.Now()
	if err != nil {
		r.lastErr = err.Error()
	}
	return err
}

// failed records err, a job's failure that a restart follows.
func (r *Runner) failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err.Error()
}

// State says where the run stands: starting, running, stopping or
// restarting while Run runs, and how it ended once Run returned. Called
// from any goroutine (GET /healthz, the CLI's signal handling).
func (r *Runner) State() RunState {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ended != RunStarting:
		return r.ended
	case r.stop != notStopped:
		return RunStopping
	case r.job != nil:
		return RunRunning
	case r.attempts == 0:
		return RunStarting
	}
	return RunRestarting
}

// Stop stops the run gracefully: sources stop reading, what they read
// drains through the pipeline, sinks flush, and with a checkpoint block a
// final checkpoint is taken; Run then returns nil. While Run waits to
// restart after a failure, Stop ends it without a restart; before the
// first job started, the job stops once it did. ErrStopping when a stop
// was asked already (Cancel then ends the run at once). Called from any
// goroutine (the CLI on SIGINT or SIGTERM).
func (r *Runner) Stop() error {
	return r.requestStop(stopDrain)
}

// StopWithoutCheckpoint stops the run at once, dropping the records in
// flight, without a final checkpoint (checkpoint.on_sigterm: none): the
// next run restores the latest checkpoint. Run returns nil. Otherwise as
// Stop. Called from any goroutine (the CLI on SIGTERM).
func (r *Runner) StopWithoutCheckpoint() error {
	return r.requestStop(stopNoCheckpoint)
}

func (r *Runner) requestStop(kind stopKind) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != notStopped {
		return ErrStopping
	}
	r.stop = kind
	if r.groupStop != nil {
		// Group mode: leaving the group ends the generation's job; its
		// open transaction is aborted, the next owner of its partitions
		// goes on from the last commit.
		r.groupStop()
		return nil
	}
	switch {
	case r.job == nil:
		r.wakeUp()
	case kind == stopDrain:
		r.job.Stop()
	default:
		r.job.Cancel()
	}
	return nil
}

// wakeUp tells Run, waiting to restart, that a stop came; r.mu is held.
func (r *Runner) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Cancel ends the run at once, dropping the records in flight, without a
// final checkpoint; Run returns an error and State says RunCancelled. It
// also cancels a stop under way. Called from any goroutine (the CLI on a
// second signal).
func (r *Runner) Cancel() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stop = stopCancel
	if r.groupStop != nil {
		r.groupStop()
		return
	}
	if r.job == nil {
		r.wakeUp()
		return
	}
	r.job.Cancel()
}

// StopWithSavepoint stops the running job as Stop does, with its final
// checkpoint taken as a savepoint and written into dir (Flink's
// stop-with-savepoint). It returns once the job accepted, without waiting
// for the stop; FinalSavepoint waits for the file. On failure nothing
// changed: ErrRestarting when no job runs, ErrStopping when a stop was
// asked already, else the job's refusal (ErrJobEnding, ErrNoCheckpoints).
// Called from any goroutine (the CLI on SIGTERM, the admin endpoint's
// handlers).
func (r *Runner) StopWithSavepoint(ctx context.Context, dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stop != notStopped:
		return ErrStopping
	case r.job == nil:
		return ErrRestarting
	}
	if err := r.job.StopWithSavepoint(ctx, dir); err != nil {
		return err
	}
	r.stop, r.finalJob = stopSavepoint, r.job
	return nil
}

// FinalSavepoint waits for the job that accepted StopWithSavepoint to end
// and returns its savepoint, or why there is none. Called from any
// goroutine (the admin endpoint's handler that asked for the stop); ctx
// ending stops the wait, not the stop.
func (r *Runner) FinalSavepoint(ctx context.Context) (Savepoint, error) {
	r.mu.Lock()
	job := r.finalJob
	r.mu.Unlock()
	if job == nil {
		return Savepoint{}, errors.New("final savepoint: no stop with savepoint was accepted")
	}
	select {
	case <-job.Done():
	case <-ctx.Done():
		return Savepoint{}, fmt.Errorf("stop with savepoint: %w (the stop goes on)", ctx.Err())
	}
	return job.FinalSavepoint()
}

// TriggerSavepoint takes a savepoint of the running job into dir and
// returns once the file is written (Job.TriggerSavepoint). ErrStopping
// or ErrRestarting when no job runs. Called from any goroutine (the admin
// endpoint's handlers).
func (r *Runner) TriggerSavepoint(ctx context.Context, dir string) (Savepoint, error) {
	r.mu.Lock()
	job, stop := r.job, r.stop
	r.mu.Unlock()
	switch {
	case job == nil && stop != notStopped:
		return Savepoint{}, ErrStopping
	case job == nil:
		return Savepoint{}, ErrRestarting
	}
	return job.TriggerSavepoint(ctx, dir)
}

// openCheckpoints opens the pipeline's checkpoint store and finds what the
// run restores from: a savepoint, the latest valid checkpoint (an unreadable
// one falls back to the previous, with a warning), or nothing. next is the
// id of the run's first checkpoint.
func openCheckpoints(ctx context.Context, logger *slog.Logger, spec *Spec, o RunnerOptions) (
	store *checkpoint.Store, restore *checkpoint.Checkpoint, next int64, err error,
) {
	// A store damaged beyond its checksums makes bbolt panic or fault:
	// that is a failure to report (exit 1), not a crash.
	err = checkpoint.Guard(o.StateDir, func() error {
		var gerr error
		store, restore, next, gerr = findRestore(ctx, logger, spec, o)
		return gerr
	})
	return store, restore, next, err
}

func findRestore(ctx context.Context, logger *slog.Logger, spec *Spec, o RunnerOptions) (
	store *checkpoint.Store, restore *checkpoint.Checkpoint, next int64, err error,
) {
	dir := o.StateDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, 0, fmt.Errorf("create state dir: %w", err)
	}
	if o.Fresh {
		if err := discardCheckpoints(dir); err != nil {
			return nil, nil, 0, err
		}
	}
	store, err = checkpoint.Open(dir, checkpoint.Options{Retain: spec.Checkpoint.Retain, Logger: logger})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("open checkpoints in %s: %w", dir, err)
	}
	list, err := store.List()
	if err != nil {
		_ = store.Close(ctx)
		return nil, nil, 0, fmt.Errorf("list checkpoints in %s: %w", dir, err)
	}
	for _, c := range list {
		next = max(next, c.ID+1)
	}
	switch {
	case o.FromSavepoint != "":
		var spID int64
		restore, spID, next, err = importSavepoint(ctx, store, o.FromSavepoint, max(next, 1))
		if err != nil {
			_ = store.Close(ctx)
			return nil, nil, 0, err
		}
		logger.Info("restoring from savepoint", "path", o.FromSavepoint, "checkpoint", spID, "imported_as", restore.ID())
	default:
		restore, err = store.Latest(ctx)
		switch {
		case errors.Is(err, checkpoint.ErrNoCheckpoint):
			logger.Info("no checkpoint to restore: starting from the beginning", "state_dir", dir)
			return store, nil, max(next, 1), nil
		case err != nil:
			_ = store.Close(ctx)
			return nil, nil, 0, fmt.Errorf("restore from %s: %w (eddy never starts fresh on its own: fix or move the state dir, or run with --fresh)", dir, err)
		}
		deltas := 0
		for _, p := range restore.Parts() {
			if p.Base != 0 {
				deltas++
			}
		}
		logger.Info("restoring from checkpoint", "checkpoint", restore.ID(), "completed", restore.CompletedAt(), "delta_parts", deltas)
	}
	if h := restore.Meta().FileHash; h != "" && h != spec.Hash {
		logger.Warn("the pipeline file changed since the checkpoint was taken; state is matched by step id", "checkpoint", restore.ID())
	}
	return store, restore, next, nil
}

// importSavepoint copies the savepoint at path into the store as a
// completed checkpoint with an id after every other (next, or the
// savepoint's id + 1 if larger) and returns it, read back from the store,
// the savepoint's own id, and the id after the copy. The run restores from
// that copy: if it crashes before its first checkpoint, a plain restart
// restores the savepoint again, not an older checkpoint of the store.
func importSavepoint(ctx context.Context, store *checkpoint.Store, path string, next int64) (restore *checkpoint.Checkpoint, spID, after int64, err error) {
	sp, err := checkpoint.OpenSavepoint(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open savepoint %s: %w", path, err)
	}
	defer func() { _ = sp.Close() }()
	id := max(next, sp.ID()+1)
	p, err := store.Begin(id, sp.Meta())
	if err != nil {
		return nil, 0, 0, fmt.Errorf("import savepoint %s as checkpoint %d: %w", path, id, err)
	}
	for _, part := range sp.Parts() {
		b, err := sp.Get(part.Name)
		if err == nil {
			err = p.Put(part.Name, b)
		}
		if err != nil {
			_ = p.Abort()
			return nil, 0, 0, fmt.Errorf("import savepoint %s: part %s: %w", path, part.Name, err)
		}
	}
	if err := p.Complete(ctx); err != nil {
		return nil, 0, 0, fmt.Errorf("import savepoint %s as checkpoint %d: %w", path, id, err)
	}
	restore, err = store.Latest(ctx)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read back savepoint %s imported as checkpoint %d: %w", path, id, err)
	}
	if restore.ID() != id {
		_ = restore.Close()
		return nil, 0, 0, fmt.Errorf("savepoint %s imported as checkpoint %d, but the newest valid checkpoint is %d", path, id, restore.ID())
	}
	return restore, sp.ID(), id + 1, nil
}

// discardCheckpoints removes the checkpoint store of dir (RunnerOptions.
// Fresh); the caller asked the user.
func discardCheckpoints(dir string) error {
	path := filepath.Join(dir, checkpoint.FileName)
	for _, f := range []string{path, path + ".owner"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("discard checkpoints: %w", err)
		}
	}
	return nil
}

// restartOptions points the next attempt at the latest complete checkpoint
// (none yet: the beginning) and at the next free checkpoint id.
func restartOptions(ctx context.Context, opts JobOptions, store *checkpoint.Store) (JobOptions, error) {
	list, err := store.List()
	if err != nil {
		return opts, err
	}
	for _, c := range list {
		opts.FirstCheckpointID = max(opts.FirstCheckpointID, c.ID+1)
	}
	latest, err := store.Latest(ctx)
	switch {
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		opts.Restore = nil
		return opts, nil
	case err != nil:
		return opts, err
	}
	// The checkpoint stays open (pinned against retention) for the rest of
	// the run; a restart is rare.
	opts.Restore = latest
	return opts, nil
}
