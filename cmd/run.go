package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/internal/memlimit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

const (
	keyStateDir  = "state-dir"
	keyGCPercent = "gc-percent"
)

// runOptions are the flags of `eddy run`.
type runOptions struct {
	global  *globalOptions
	restore restoreOptions
}

// AddFlags adds --state-dir and binds it to viper (EDDY_STATE_DIR).
func (o *runOptions) AddFlags(fs *pflag.FlagSet) {
	fs.String(keyStateDir, "./eddy-state", "directory for checkpoints and state, a sub-directory per pipeline name (env "+envName(keyStateDir)+")")
	bindFlag(o.global.v, fs, keyStateDir)
	fs.BoolVar(&o.restore.fresh, "fresh", false, "ignore the pipeline's checkpoints: discard them and start from the beginning (asks first)")
	fs.BoolVar(&o.restore.yes, "yes", false, "with --fresh: do not ask")
	fs.StringVar(&o.restore.fromSavepoint, "from-savepoint", "", "restore from this savepoint file instead of the latest checkpoint")
	fs.BoolVar(&o.restore.allowDropped, "allow-non-restored-state", false, "restore even when the checkpoint holds state of steps the pipeline no longer has (that state is dropped)")
	fs.Int(keyGCPercent, memlimit.DefaultGCPercent, "Go GC percent while running, unless GOGC is set (env "+envName(keyGCPercent)+")")
	bindFlag(o.global.v, fs, keyGCPercent)
	fs.String(keyAdminAddr, defaultAdminAddr, "address of the admin endpoint (savepoints, /healthz, /metrics); port 0 picks a free one, off disables it (env "+envName(keyAdminAddr)+")")
	bindFlag(o.global.v, fs, keyAdminAddr)
}

func newRunCommand(g *globalOptions) *cobra.Command {
	o := &runOptions{global: g}
	c := &cobra.Command{
		Use:   "run FILE",
		Short: "Run a pipeline until its input ends or it is stopped",
		Long: `Run loads, validates and runs the pipeline in FILE.

A pipeline whose sources are all bounded (a file, a generator with count)
ends when its input ends. SIGINT or SIGTERM stop it gracefully: sources stop
reading, what they read drains through the pipeline and the sinks flush. A
second signal cancels at once, dropping what is in flight. With a checkpoint
block, SIGINT stops with a final checkpoint, and SIGTERM does what the
block's on_sigterm says: savepoint (the default: the final checkpoint is
also written as a savepoint file, whose path the log gives), checkpoint, or
none (no final checkpoint: the next run restores the latest one).

The admin endpoint (--admin-addr, 127.0.0.1 and a free port by default;
the container image sets 0.0.0.0:9249) serves
` + adminEndpointList("  ") + `
The run logs its address and, with a checkpoint block, writes it to
<state dir>/<pipeline>/admin.addr for eddy savepoint trigger. eddy health
probes GET /healthz.

Logs go to stderr (--log-level, --log-format); sinks of type stdout write to
stdout. On exit a summary logs the records read by each source and written
by each sink (written counts what a sink wrote out: flushed, or committed
for a sink that commits per checkpoint, also after a failure), and, at warn
level, the records that failed in each source or step that had any: errors,
and how many of them were skipped or dead-lettered (on_error).

Exit codes: 0 the input ended or the pipeline was stopped gracefully,
1 the pipeline failed or was cancelled, 2 the file is invalid.`,
		Args:              exactArgs(1, "one pipeline file"),
		ValidArgsFunction: pipelineFiles,
		RunE: func(c *cobra.Command, args []string) error {
			return o.run(c, args[0])
		},
	}
	o.AddFlags(c.Flags())
	return c
}

func (o *runOptions) run(c *cobra.Command, file string) error {
	logger, err := o.global.newLogger(c.ErrOrStderr())
	if err != nil {
		return err
	}
	plan, err := loadPlan(c.ErrOrStderr(), file)
	if err != nil {
		return err
	}
	spec := plan.Spec
	adminAddr := strings.TrimSpace(o.global.v.GetString(keyAdminAddr))
	if err := checkAdminAddr(adminAddr); err != nil {
		return err
	}
	logger = logger.With("pipeline", spec.Name)
	memlimit.Apply(logger, o.global.v.GetInt(keyGCPercent))
	subtasks := 0
	for _, ch := range plan.Chains {
		subtasks += ch.Parallelism
	}
	logger.Info("starting pipeline", "file", file, "tasks", len(plan.Chains), "subtasks", subtasks,
		"guarantee", plan.Guarantee.String(),
		"state_dir", stateDir(spec, o.global.v.GetString(keyStateDir)))
	if plan.Guarantee < pipeline.ExactlyOnce {
		logger.Warn("end-to-end guarantee is below exactly-once", "guarantee", plan.Guarantee.String(),
			"why", strings.Join(plan.GuaranteeWhy, "; "))
	}
	for _, ch := range plan.Chains {
		logger.Debug("task", "index", ch.Index, "nodes", ch.Name(), "parallelism", ch.Parallelism)
	}

	// Install the handler before the job starts, so that no signal between
	// the two kills the process without a graceful stop.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	metrics := pipeline.NewMetrics()
	// StateDir also without a checkpoint block: state.backend bbolt keeps
	// its live files under it.
	// The stdin source and the stdout sink use the command's streams.
	opts := pipeline.JobOptions{Logger: logger, Metrics: metrics, AllowNonRestoredState: o.restore.allowDropped,
		StateDir: stateDir(spec, o.global.v.GetString(keyStateDir)), Stdin: c.InOrStdin(), Stdout: c.OutOrStdout()}
	var store *statestore.CheckpointStore
	if spec.Checkpoint != nil {
		dir := stateDir(spec, o.global.v.GetString(keyStateDir))
		var restore *statestore.Checkpoint
		var next int64
		store, restore, next, err = openCheckpoints(c.Context(), logger, spec, dir, o.restore, c.InOrStdin(), c.ErrOrStderr())
		if err != nil {
			var ee *exitError
			if errors.As(err, &ee) {
				return err
			}
			logger.Error("cannot start", "err", err)
			return reported(exitFailure)
		}
		defer func() { _ = store.Close(context.WithoutCancel(c.Context())) }()
		opts.Store, opts.FirstCheckpointID, opts.StateDir = pipeline.BoltCheckpoints(store), next, dir
		if restore != nil {
			defer func() { _ = restore.Close() }()
			opts.Restore = pipeline.RestoredFrom(restore)
		}
	} else if o.restore.fresh || o.restore.fromSavepoint != "" {
		return invalidInput("--fresh and --from-savepoint need a checkpoint block in %s", file)
	}
	pipelineDir := stateDir(spec, o.global.v.GetString(keyStateDir))
	ctl := &runControl{logger: logger, checkpoints: spec.Checkpoint != nil, spDir: filepath.Join(pipelineDir, savepointsDir)}
	if spec.Checkpoint != nil {
		ctl.onSigterm = spec.Checkpoint.OnSigterm
	}
	var admin *adminServer
	if adminEnabled(adminAddr) {
		admin, err = startAdmin(logger, adminAddr, ctl, metrics, spec.Name, ctl.spDir)
		if err != nil {
			logger.Error("cannot start", "err", err)
			return reported(exitFailure)
		}
		defer func() {
			if err := admin.close(context.WithoutCancel(c.Context())); err != nil {
				logger.Warn("admin endpoint", "err", err.Error())
			}
		}()
	}
	start := time.Now()
	policy := pipeline.NewRestartPolicy(spec.Restart)
	var runErr error
	var stop stopKind
	for attempt := 1; ; attempt++ {
		job, err := pipeline.Start(c.Context(), plan, opts)
		if err != nil {
			logger.Error("pipeline failed to start", "err", err)
			return reported(exitFailure)
		}
		ctl.started(job)
		// The address file goes where the checkpoint store (whose lock this
		// process holds) is: a pipeline without one gets no state dir.
		if attempt == 1 && admin != nil && spec.Checkpoint != nil {
			addrFile := filepath.Join(pipelineDir, adminAddrFile)
			if err := admin.publish(addrFile); err != nil {
				logger.Warn("eddy savepoint trigger will not find this run", "err", err.Error())
			} else {
				logger.Debug("admin endpoint address written", "file", addrFile)
			}
		}
	wait:
		for {
			select {
			case <-job.Done():
				break wait
			case sig := <-sigs:
				ctl.signal(c.Context(), sig)
			}
		}
		runErr = job.Wait()
		var finalSavepoint bool
		stop, finalSavepoint = ctl.ended()
		if stop == stopNoCheckpoint && errors.Is(runErr, context.Canceled) {
			runErr = nil // the stop asked for
		}
		if finalSavepoint && runErr == nil {
			sp, err := job.FinalSavepoint()
			if err != nil {
				runErr = fmt.Errorf("%w (the final checkpoint is in the store: eddy checkpoints export writes it as a savepoint)", err)
			} else {
				logger.Info("stopped with a savepoint", "checkpoint", sp.ID, "path", sp.Path)
			}
		}
		if runErr == nil || stop != notStopped {
			break
		}
		// A failure: restart from the latest checkpoint if the strategy allows.
		delay, why := policy.Next(time.Now())
		if why != nil {
			if spec.Restart.Strategy != "none" {
				logger.Error("not restarting", "reason", why.Error())
			}
			break
		}
		metrics.Restarted()
		logger.Warn("pipeline failed: restarting from the latest checkpoint", "err", runErr.Error(), "restart", attempt, "delay", delay)
		select {
		case <-time.After(delay):
		case sig := <-sigs:
			logger.Info("not restarting: stopped while waiting to restart", "signal", sig.String())
			return reported(exitFailure)
		}
		if opts, err = restartOptions(c.Context(), opts, store); err != nil {
			logger.Error("cannot restart", "err", err)
			return reported(exitFailure)
		}
		if plan, err = pipeline.Compile(spec); err != nil {
			logger.Error("cannot restart", "err", err)
			return reported(exitFailure)
		}
	}

	status := "finished"
	switch {
	case stop == stopCancel:
		status = "cancelled"
	case runErr != nil:
		status = "failed"
	case stop != notStopped:
		status = "stopped"
	}

	read, written, failed := summarize(logger, plan, metrics)
	if status == "finished" && read == 0 && opts.Restore != nil && o.restore.fromSavepoint == "" {
		warnAlreadyFinished(logger, opts.Restore.ID())
	}
	attrs := []any{"status", status, "duration", time.Since(start).Round(time.Millisecond),
		"records_read", read, "records_written", written}
	if failed > 0 {
		attrs = append(attrs, "record_errors", failed)
	}
	switch status {
	case "cancelled":
		logger.Warn("pipeline cancelled", attrs...)
		return reported(exitFailure)
	case "failed":
		logger.Error("pipeline failed", append(attrs, "err", runErr.Error())...)
		return reported(exitFailure)
	}
	logger.Info("pipeline "+status, attrs...)
	return nil
}

// summarize logs the records each source read and each sink wrote out
// (eddy_sink_records_written_total), and the records that failed in each
// source or step that had any (by what its on_error did with them), summed
// over subtasks; it returns the totals.
func summarize(logger *slog.Logger, plan *pipeline.Plan, m *pipeline.Metrics) (read, written, failed int64) {
	count := func(n *pipeline.Node, counter func(pipeline.SubtaskInfo) float64) int64 {
		var sum float64
		for sub := range n.Parallelism {
			sum += counter(pipeline.SubtaskInfo{ID: n.ID, Subtask: sub, Parallelism: n.Parallelism})
		}
		return int64(sum)
	}
	errs := m.RecordErrorCounts()
	// log logs a summary line, at warn level with the node's errors if it
	// had any.
	log := func(msg string, n *pipeline.Node, attrs ...any) {
		c, ok := errs[n.ID]
		if !ok {
			logger.Info(msg, attrs...)
			return
		}
		failed += c.Total()
		logger.Warn(msg, append(attrs, "errors", c.Total(), "skipped", c.Skipped, "dead_lettered", c.DeadLettered)...)
	}
	for _, n := range plan.Nodes {
		switch n.Kind {
		case pipeline.SourceNode:
			r := count(n, func(i pipeline.SubtaskInfo) float64 { return pipeline.CounterValue(m.RecordsOut(i)) })
			log("source summary", n, "source", n.ID, "type", n.Type, "records_read", r)
			read += r
		case pipeline.StepNode:
			if _, ok := errs[n.ID]; ok {
				log("step summary", n, "step", n.ID, "kind", n.Type)
			}
		case pipeline.SinkNode:
			w := count(n, func(i pipeline.SubtaskInfo) float64 { return pipeline.CounterValue(m.RecordsWritten(i)) })
			logger.Info("sink summary", "sink", n.ID, "type", n.Type, "records_written", w)
			written += w
		}
	}
	return read, written, failed
}

// restartOptions points the next attempt at the latest complete checkpoint
// (none yet: the beginning) and at the next free checkpoint id.
func restartOptions(ctx context.Context, opts pipeline.JobOptions, store *statestore.CheckpointStore) (pipeline.JobOptions, error) {
	list, err := store.List()
	if err != nil {
		return opts, err
	}
	for _, c := range list {
		opts.FirstCheckpointID = max(opts.FirstCheckpointID, c.ID+1)
	}
	latest, err := store.Latest(ctx)
	switch {
	case errors.Is(err, statestore.ErrNoCheckpoint):
		opts.Restore = nil
		return opts, nil
	case err != nil:
		return opts, err
	}
	// The checkpoint stays open (pinned against retention) for the rest of
	// the process; a restart is rare.
	opts.Restore = pipeline.RestoredFrom(latest)
	return opts, nil
}

// stopKind is how a run was asked to stop.
type stopKind int

const (
	notStopped       stopKind = iota
	stopDrain                 // graceful, with a final checkpoint (if any)
	stopSavepoint             // graceful, the final checkpoint taken as a savepoint
	stopNoCheckpoint          // on_sigterm: none: at once, without a final checkpoint
	stopCancel                // a second signal: at once
)

// runControl is what the signal handling (the run's goroutine) and the
// admin endpoint (its handler goroutines) share: the job of the current
// attempt (nil between attempts) and how the run was asked to stop.
type runControl struct {
	logger      *slog.Logger
	checkpoints bool
	onSigterm   pipeline.SigtermAction
	spDir       string // the default savepoint directory

	mu             sync.Mutex
	job            *pipeline.Job
	attempts       int
	stop           stopKind
	finalSavepoint bool // the job accepted a stop with savepoint
}

// started records the job of a new attempt.
func (r *runControl) started(job *pipeline.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job, r.stop, r.finalSavepoint = job, notStopped, false
	r.attempts++
}

// ended records that the attempt's job ended, and says how it was asked to
// stop and whether with a savepoint.
func (r *runControl) ended() (stopKind, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job = nil
	return r.stop, r.finalSavepoint
}

// state is the run's state for GET /healthz: starting, running, stopping
// or restarting (waiting for the restart delay).
func (r *runControl) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.job != nil && r.stop != notStopped:
		return "stopping"
	case r.job != nil:
		return "running"
	case r.stop != notStopped:
		return "stopping"
	case r.attempts == 0:
		return "starting"
	}
	return "restarting"
}

// signal handles SIGINT or SIGTERM while a job runs: the first stops it
// as on_sigterm (SIGTERM) or with a final checkpoint (SIGINT) says, the
// next cancels it. Called on the run's goroutine.
func (r *runControl) signal(ctx context.Context, sig os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != notStopped {
		r.stop = stopCancel
		r.logger.Warn("cancelling: records in flight are dropped", "signal", sig.String())
		r.job.Cancel()
		return
	}
	action := pipeline.SigtermCheckpoint
	if sig == syscall.SIGTERM && r.checkpoints {
		action = r.onSigterm
	}
	switch action {
	case pipeline.SigtermSavepoint:
		r.logger.Info("stopping with a savepoint: sources stop, in-flight records drain, sinks flush, the final checkpoint is written as a savepoint; signal again to cancel",
			"signal", sig.String(), "dir", r.spDir)
		if err := r.stopWithSavepoint(ctx, r.spDir); err != nil {
			r.logger.Warn("stopping with the final checkpoint, without a savepoint", "reason", err.Error())
			r.stop = stopDrain
			r.job.Stop()
		}
	case pipeline.SigtermNone:
		r.stop = stopNoCheckpoint
		r.logger.Info("stopping without a final checkpoint (on_sigterm: none): records in flight are dropped, the next run restores the latest checkpoint",
			"signal", sig.String())
		r.job.Cancel()
	default:
		r.stop = stopDrain
		r.logger.Info("stopping gracefully: sources stop, in-flight records drain, sinks flush; signal again to cancel",
			"signal", sig.String())
		r.job.Stop()
	}
}

// stopWithSavepoint asks the job for a stop with savepoint into dir; r.mu
// is held. On failure nothing changed.
func (r *runControl) stopWithSavepoint(ctx context.Context, dir string) error {
	if err := r.job.StopWithSavepoint(ctx, dir); err != nil {
		return err
	}
	r.stop, r.finalSavepoint = stopSavepoint, true
	return nil
}

// savepoint takes a savepoint into dir for the admin endpoint, or stops the
// run with one (stop), and returns once the file is written. Called from
// the endpoint's handler goroutines.
func (r *runControl) savepoint(ctx context.Context, dir string, stop bool) (pipeline.Savepoint, error) {
	r.mu.Lock()
	job := r.job
	switch {
	case job == nil && r.stop != notStopped:
		r.mu.Unlock()
		return pipeline.Savepoint{}, errStopping
	case job == nil:
		r.mu.Unlock()
		return pipeline.Savepoint{}, errRestarting
	case !stop:
		r.mu.Unlock()
		return job.TriggerSavepoint(ctx, dir)
	case r.stop != notStopped:
		r.mu.Unlock()
		return pipeline.Savepoint{}, errStopping
	}
	r.logger.Info("stopping with a savepoint, as the admin endpoint was asked: sources stop, in-flight records drain, sinks flush; signal to cancel", "dir", dir)
	err := r.stopWithSavepoint(ctx, dir)
	r.mu.Unlock()
	if err != nil {
		return pipeline.Savepoint{}, err
	}
	select {
	case <-job.Done():
	case <-ctx.Done():
		return pipeline.Savepoint{}, fmt.Errorf("stop with savepoint: %w (the stop goes on)", ctx.Err())
	}
	return job.FinalSavepoint()
}

// checkAdminAddr rejects an --admin-addr that is neither off nor HOST:PORT.
func checkAdminAddr(addr string) error {
	if !adminEnabled(addr) {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usageError("--%s %q: want HOST:PORT (port 0 picks a free one), or off (%v)", keyAdminAddr, addr, err)
	}
	return nil
}
