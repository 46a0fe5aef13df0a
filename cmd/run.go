package cmd

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/eddy-stream/eddy/internal/memlimit"
	"github.com/eddy-stream/eddy/pipeline"
)

const (
	keyStateDir  = "state-dir"
	keyGCPercent = "gc-percent"
)

// runOptions are the flags of `eddy run`.
type runOptions struct {
	global  *globalOptions
	restore restoreOptions
	// quiet: no progress line.
	quiet bool
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
	addAdminFlags(fs, o.global.v, defaultAdminAddr)
	fs.BoolVar(&o.quiet, "quiet", false, "no progress line on the terminal")
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

SIGHUP reloads what can change while the pipeline runs: the --env-file is
read again and the log level set anew (--log-level, then EDDY_LOG_LEVEL set
outside the file, then the file's). Under systemd (Type=notify: the
environment has NOTIFY_SOCKET) eddy reports READY=1 once the pipeline
restored its state and runs, STATUS= lines, RELOADING=1 and READY=1 around
a reload, STOPPING=1, and pings the watchdog (WatchdogSec) while the
pipeline runs (docs/running.md, "systemd").

The admin endpoint (--admin-addr, 127.0.0.1 and a free port by default;
the container image sets 0.0.0.0:9249) serves
` + adminEndpointList("  ") + `
The run logs its address and, with a checkpoint block, writes it to
<state dir>/<pipeline>/admin.addr for eddy savepoint trigger. eddy health
probes GET /healthz. With EDDY_ADMIN_TOKEN set, every POST needs the header
"Authorization: Bearer $EDDY_ADMIN_TOKEN"; on an address other than a
loopback one the run refuses to start without it (exit 2).

Logs go to stderr (--log-level, --log-format); sinks of type stdout write to
stdout. On a terminal, a bounded pipeline shows a progress line below the
logs: the records read, how fast, how much of the input (files: bytes,
generators: count) and the time left; --quiet or --log-format json turn it
off. On exit a summary logs the records read by each source and written
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
	stderr := o.progressOutput(c.ErrOrStderr())
	logger, err := o.global.newLogger(stderr)
	if err != nil {
		return err
	}
	plan, err := loadPlan(c.ErrOrStderr(), file)
	if err != nil {
		return err
	}
	spec := plan.Spec
	adminSet, err := readAdminSettings(o.global.v)
	if err != nil {
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
	svc := newService(logger, o.global, spec.Checkpoint != nil, metrics)
	defer svc.close()
	pipelineDir := stateDir(spec, o.global.v.GetString(keyStateDir))
	if spec.Checkpoint == nil && (o.restore.fresh || o.restore.fromSavepoint != "") {
		return invalidInput("--fresh and --from-savepoint need a checkpoint block in %s", file)
	}
	if o.restore.fresh {
		if err := confirmFresh(pipelineDir, o.restore.yes, c.InOrStdin(), c.ErrOrStderr()); err != nil {
			return err
		}
	}
	spDir := filepath.Join(pipelineDir, savepointsDir)
	var admin *adminServer
	ran := make(chan struct{}) // closed once Run returned
	// StateDir also without a checkpoint block: state.backend bbolt keeps
	// its live files under it.
	var r *pipeline.Runner
	r, err = pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: logger, Metrics: metrics, StateDir: pipelineDir,
		Fresh: o.restore.fresh, FromSavepoint: o.restore.fromSavepoint, AllowNonRestoredState: o.restore.allowDropped,
		Stdin: c.InOrStdin(), Stdout: c.OutOrStdout(),
		OnRunning: svc.jobRunning,
		OnStart: func(attempt int) {
			svc.jobStarted(attempt)
			if attempt == 1 && spec.Group == nil {
				go handleSignals(c.Context(), logger, r, spec, spDir, sigs, ran)
			}
			if admin != nil {
				admin.jobStarted()
			}
			// The address file goes where the checkpoint store (whose lock
			// this process holds) is: a pipeline without one gets no state
			// dir.
			if attempt == 1 && admin != nil && spec.Checkpoint != nil {
				addrFile := filepath.Join(pipelineDir, adminAddrFile)
				if err := admin.publish(addrFile); err != nil {
					logger.Warn("eddy savepoint trigger will not find this run", "err", err.Error())
				} else {
					logger.Debug("admin endpoint address written", "file", addrFile)
				}
			}
		}})
	if err != nil {
		logger.Error("cannot start", "err", err)
		return reported(exitFailure)
	}
	svc.watch(r)
	if spec.Group != nil {
		// A group run may wait for partitions before its first job: it
		// leaves the group on a signal from the start.
		go handleSignals(c.Context(), logger, r, spec, spDir, sigs, ran)
	}
	if adminEnabled(adminSet.addr) {
		admin, err = startAdmin(logger, adminSet, r, metrics, spec, spDir)
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
	stopProgress := startProgress(stderr, r, metrics)
	runErr := r.Run(c.Context())
	stopProgress()
	close(ran)
	status := r.State()
	if !status.Ended() {
		return reported(exitFailure) // the runner logged why
	}

	read, written, failed := summarize(logger, r.Plan(), metrics)
	if status == pipeline.RunFinished && read == 0 && r.Restored() != 0 && o.restore.fromSavepoint == "" {
		warnAlreadyFinished(logger, r.Restored())
	}
	attrs := []any{"status", status.String(), "duration", time.Since(start).Round(time.Millisecond),
		"records_read", read, "records_written", written}
	if failed > 0 {
		attrs = append(attrs, "record_errors", failed)
	}
	switch status {
	case pipeline.RunCancelled:
		logger.Warn("pipeline cancelled", attrs...)
		return reported(exitFailure)
	case pipeline.RunFailed:
		logger.Error("pipeline failed", append(attrs, "err", runErr.Error())...)
		return reported(exitFailure)
	}
	logger.Info("pipeline "+status.String(), attrs...)
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

// handleSignals handles SIGINT and SIGTERM until ran is closed. It runs on
// a goroutine of its own from the start of the first job; a signal before
// that waits in sigs.
func handleSignals(ctx context.Context, logger *slog.Logger, r *pipeline.Runner, spec *pipeline.Spec, spDir string, sigs <-chan os.Signal, ran <-chan struct{}) {
	for {
		select {
		case sig := <-sigs:
			onSignal(ctx, logger, r, spec, spDir, sig)
		case <-ran:
			return
		}
	}
}

// onSignal handles SIGINT or SIGTERM: the first stops the run as
// on_sigterm (SIGTERM) or with a final checkpoint (SIGINT) says, the next
// cancels it. While the run waits to restart, a signal ends it (the runner
// logs that it does not restart).
func onSignal(ctx context.Context, logger *slog.Logger, r *pipeline.Runner, spec *pipeline.Spec, spDir string, sig os.Signal) {
	cancel := func() {
		logger.Warn("cancelling: records in flight are dropped", "signal", sig.String())
		r.Cancel()
	}
	switch r.State() {
	case pipeline.RunStopping:
		cancel()
		return
	case pipeline.RunRestarting:
		_ = r.Stop()
		return
	}
	action := pipeline.SigtermCheckpoint
	if sig == syscall.SIGTERM && spec.Checkpoint != nil {
		action = spec.Checkpoint.OnSigterm
	}
	var err error
	switch action {
	case pipeline.SigtermSavepoint:
		logger.Info("stopping with a savepoint: sources stop, in-flight records drain, sinks flush, the final checkpoint is written as a savepoint; signal again to cancel",
			"signal", sig.String(), "dir", spDir)
		if err = r.StopWithSavepoint(ctx, spDir); err != nil && !errors.Is(err, pipeline.ErrStopping) {
			logger.Warn("stopping with the final checkpoint, without a savepoint", "reason", err.Error())
			err = r.Stop()
		}
	case pipeline.SigtermNone:
		logger.Info("stopping without a final checkpoint (on_sigterm: none): records in flight are dropped, the next run restores the latest checkpoint",
			"signal", sig.String())
		err = r.StopWithoutCheckpoint()
	default:
		logger.Info("stopping gracefully: sources stop, in-flight records drain, sinks flush; signal again to cancel",
			"signal", sig.String())
		err = r.Stop()
	}
	if errors.Is(err, pipeline.ErrStopping) {
		cancel() // the admin endpoint stopped it meanwhile
	}
}
