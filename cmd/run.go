package cmd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/connectors/stdio"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

const keyStateDir = "state-dir"

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
	fs.Int(keyGCPercent, defaultGCPercent, "Go GC percent while running, unless GOGC is set (env "+envName(keyGCPercent)+")")
	bindFlag(o.global.v, fs, keyGCPercent)
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
second signal cancels at once, dropping what is in flight.

Logs go to stderr (--log-level, --log-format); sinks of type stdout write to
stdout. On exit a summary logs the records read by each source and written
by each sink.

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
	logger = logger.With("pipeline", spec.Name)
	tuneMemory(logger, o.global.v.GetInt(keyGCPercent))
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

	// The stdin source and the stdout sink use the command's streams.
	prevIn, prevOut := stdio.Stdin, stdio.Stdout
	stdio.Stdin, stdio.Stdout = c.InOrStdin(), c.OutOrStdout()
	defer func() { stdio.Stdin, stdio.Stdout = prevIn, prevOut }()

	// Install the handler before the job starts, so that no signal between
	// the two kills the process without a graceful stop.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	metrics := pipeline.NewMetrics()
	opts := pipeline.JobOptions{Logger: logger, Metrics: metrics, AllowNonRestoredState: o.restore.allowDropped}
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
		opts.Store, opts.FirstCheckpointID = pipeline.BoltCheckpoints(store), next
		if restore != nil {
			defer func() { _ = restore.Close() }()
			opts.Restore = pipeline.RestoredFrom(restore)
		}
	} else if o.restore.fresh || o.restore.fromSavepoint != "" {
		return invalidInput("--fresh and --from-savepoint need a checkpoint block in %s", file)
	}
	start := time.Now()
	policy := pipeline.NewRestartPolicy(spec.Restart)
	status := "finished"
	stopped := false
	var runErr error
	for attempt := 1; ; attempt++ {
		job, err := pipeline.Start(c.Context(), plan, opts)
		if err != nil {
			logger.Error("pipeline failed to start", "err", err)
			return reported(exitFailure)
		}
	wait:
		for {
			select {
			case <-job.Done():
				break wait
			case sig := <-sigs:
				if !stopped {
					stopped, status = true, "stopped"
					logger.Info("stopping gracefully: sources stop, in-flight records drain, sinks flush; signal again to cancel",
						"signal", sig.String())
					job.Stop()
					continue
				}
				status = "cancelled"
				logger.Warn("cancelling: records in flight are dropped", "signal", sig.String())
				job.Cancel()
			}
		}
		runErr = job.Wait()
		if runErr == nil || stopped {
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

	if runErr != nil && status != "cancelled" {
		status = "failed"
	}

	read, written := summarize(logger, plan, metrics)
	attrs := []any{"status", status, "duration", time.Since(start).Round(time.Millisecond),
		"records_read", read, "records_written", written}
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

// summarize logs the records each source read and each sink wrote, summed
// over subtasks, and returns the totals.
func summarize(logger *slog.Logger, plan *pipeline.Plan, m *pipeline.Metrics) (read, written int64) {
	count := func(n *pipeline.Node, counter func(pipeline.SubtaskInfo) float64) int64 {
		var sum float64
		for sub := range n.Parallelism {
			sum += counter(pipeline.SubtaskInfo{ID: n.ID, Subtask: sub, Parallelism: n.Parallelism})
		}
		return int64(sum)
	}
	for _, n := range plan.Nodes {
		switch n.Kind {
		case pipeline.SourceNode:
			r := count(n, func(i pipeline.SubtaskInfo) float64 { return pipeline.CounterValue(m.RecordsOut(i)) })
			logger.Info("source summary", "source", n.ID, "type", n.Type, "records_read", r)
			read += r
		case pipeline.SinkNode:
			w := count(n, func(i pipeline.SubtaskInfo) float64 { return pipeline.CounterValue(m.RecordsIn(i)) })
			logger.Info("sink summary", "sink", n.ID, "type", n.Type, "records_written", w)
			written += w
		}
	}
	return read, written
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
