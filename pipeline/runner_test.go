package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// runnerText is a checkpointed pipeline from one seq source through a pass
// step to a collect sink. The %s are the restart block, the source's length
// (count: N, forever: true) and the pass step's failing n.
const runnerText = `
version: 1
name: runner
checkpoint:
  interval: 5ms
%s
sources:
  - id: nums
    type: seq
    %s
    pace: true
steps:
  - id: p
    pass: %d
    on_error: fail
sinks:
  - id: out
    type: collect
`

// logRecorder is a slog handler that keeps the messages logged and sends
// each on seen (dropped when nobody reads it).
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
	seen chan string
}

func newLogRecorder() *logRecorder { return &logRecorder{seen: make(chan string, 64)} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	select {
	case l.seen <- r.Message:
	default:
	}
	return nil
}

func (l *logRecorder) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.msgs)
}

// waitFor blocks until msg is logged.
func (l *logRecorder) waitFor(t *testing.T, msg string) {
	t.Helper()
	for m := range l.seen {
		if m == msg {
			return
		}
	}
}

// newRunner loads runnerText and returns its runner on dir with the
// collector of its sink.
func newRunner(t *testing.T, dir, restart, length string, failOn int, opts pipeline.RunnerOptions) (*pipeline.Runner, *collector) {
	t.Helper()
	plan, cols := load(t, fmt.Sprintf(runnerText, restart, length, failOn))
	opts.StateDir = dir
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := pipeline.NewRunner(plan.Spec, opts)
	require.NoError(t, err)
	return r, cols["out"]
}

func ns(out []map[string]any) []int {
	var got []int
	for _, r := range out {
		got = append(got, r["n"].(int))
	}
	slices.Sort(got)
	return got
}

// TestRunnerRestoresTheLatestCheckpoint: a run whose input ended leaves a
// final checkpoint; the next run on the same state dir restores it and
// reads nothing more, unless it starts fresh.
func TestRunnerRestoresTheLatestCheckpoint(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name  string
		fresh bool
		want  int
		log   string
	}{
		{name: "first run", want: 300, log: "no checkpoint to restore: starting from the beginning"},
		{name: "restored", want: 0, log: "restoring from checkpoint"},
		{name: "fresh", fresh: true, want: 300, log: "no checkpoint to restore: starting from the beginning"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := newLogRecorder()
			r, out := newRunner(t, dir, "", "count: 300", -1, pipeline.RunnerOptions{Logger: slog.New(logs), Fresh: tt.fresh})
			require.NoError(t, r.Run(context.Background()))
			require.Equal(t, pipeline.RunFinished, r.State())
			require.Len(t, out.all(), tt.want)
			require.Contains(t, logs.messages(), tt.log)
		})
	}
}

// TestRunnerRestarts: a job that fails on every attempt is restarted as
// the strategy allows, then the run fails with its error.
func TestRunnerRestarts(t *testing.T) {
	metrics := pipeline.NewMetrics()
	var attempts []int
	r, _ := newRunner(t, t.TempDir(), "restart:\n  strategy: fixed_delay\n  attempts: 2\n  delay: 1ms", "count: 300", 150,
		pipeline.RunnerOptions{Metrics: metrics, OnStart: func(a int) { attempts = append(attempts, a) }})
	err := r.Run(context.Background())
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.Equal(t, pipeline.RunFailed, r.State())
	require.Equal(t, []int{1, 2, 3}, attempts)
}

// TestRunnerStops covers how a run ends when asked to: the state it ends
// in and what Run returns.
func TestRunnerStops(t *testing.T) {
	for _, tt := range []struct {
		name string
		// stop is called from OnStart of the first job, on Run's goroutine.
		stop    func(*pipeline.Runner) error
		want    pipeline.RunState
		wantErr error
	}{
		{name: "stop", stop: (*pipeline.Runner).Stop, want: pipeline.RunStopped},
		{name: "without checkpoint", stop: (*pipeline.Runner).StopWithoutCheckpoint, want: pipeline.RunStopped},
		{name: "cancel", stop: func(r *pipeline.Runner) error { r.Cancel(); return nil }, want: pipeline.RunCancelled, wantErr: context.Canceled},
		{name: "stop then cancel", stop: func(r *pipeline.Runner) error {
			require.NoError(t, r.Stop())
			require.ErrorIs(t, r.Stop(), pipeline.ErrStopping, "a second stop")
			r.Cancel()
			return nil
		}, want: pipeline.RunCancelled, wantErr: context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r *pipeline.Runner
			r, _ = newRunner(t, t.TempDir(), "", "forever: true", -1, pipeline.RunnerOptions{OnStart: func(int) {
				require.Equal(t, pipeline.RunRunning, r.State())
				require.NoError(t, tt.stop(r))
			}})
			err := r.Run(context.Background())
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, r.State())
		})
	}
}

// TestRunnerStopBeforeStart: a stop that comes before the first job
// started stops that job once it did.
func TestRunnerStopBeforeStart(t *testing.T) {
	r, _ := newRunner(t, t.TempDir(), "", "forever: true", -1, pipeline.RunnerOptions{})
	require.Equal(t, pipeline.RunStarting, r.State())
	_, err := r.TriggerSavepoint(context.Background(), t.TempDir())
	require.ErrorIs(t, err, pipeline.ErrRestarting, "no job runs yet")
	require.NoError(t, r.Stop())
	require.ErrorIs(t, r.StopWithSavepoint(context.Background(), t.TempDir()), pipeline.ErrStopping)
	require.NoError(t, r.Run(context.Background()))
	require.Equal(t, pipeline.RunStopped, r.State())
}

// TestRunnerStopWhileRestarting: a stop while the run waits to restart
// ends it without a restart.
func TestRunnerStopWhileRestarting(t *testing.T) {
	logs := newLogRecorder()
	var attempts []int
	r, _ := newRunner(t, t.TempDir(), "restart:\n  strategy: fixed_delay\n  attempts: 2\n  delay: 1h", "count: 300", 150,
		pipeline.RunnerOptions{Logger: slog.New(logs), OnStart: func(a int) { attempts = append(attempts, a) }})
	ran := make(chan error, 1)
	go func() { ran <- r.Run(context.Background()) }()
	logs.waitFor(t, "pipeline failed: restarting from the latest checkpoint")
	require.Equal(t, pipeline.RunRestarting, r.State())
	require.ErrorIs(t, r.StopWithSavepoint(context.Background(), t.TempDir()), pipeline.ErrRestarting)
	require.NoError(t, r.Stop())
	err := <-ran
	require.ErrorIs(t, err, pipeline.ErrRecordFailed, "the failure it did not restart after")
	require.Equal(t, pipeline.RunAborted, r.State())
	require.Equal(t, []int{1}, attempts)
	require.Contains(t, logs.messages(), "not restarting: stopped while waiting to restart")
}

// TestRunnerStopWithSavepoint stops a run with a savepoint and restores
// the savepoint into a run on another state dir: together the two runs
// saw every record once.
func TestRunnerStopWithSavepoint(t *testing.T) {
	const n = 20000
	spDir := t.TempDir()
	var r1 *pipeline.Runner
	var out1 *collector
	r1, out1 = newRunner(t, t.TempDir(), "", fmt.Sprintf("count: %d", n), -1, pipeline.RunnerOptions{OnStart: func(int) {
		<-out1.written // the savepoint holds a position to restore
		require.NoError(t, r1.StopWithSavepoint(context.Background(), spDir))
		require.ErrorIs(t, r1.Stop(), pipeline.ErrStopping)
	}})
	out1.written = make(chan int, n) // a send per write, never blocking
	require.NoError(t, r1.Run(context.Background()))
	require.Equal(t, pipeline.RunStopped, r1.State())
	sp, err := r1.FinalSavepoint(context.Background())
	require.NoError(t, err)
	require.True(t, sp.Final)
	_, err = os.Stat(sp.Path)
	require.NoError(t, err)

	r2, out2 := newRunner(t, t.TempDir(), "", fmt.Sprintf("count: %d", n), -1, pipeline.RunnerOptions{FromSavepoint: sp.Path})
	require.NoError(t, r2.Run(context.Background()))
	require.Equal(t, pipeline.RunFinished, r2.State())
	got := ns(append(out1.all(), out2.all()...))
	require.Len(t, got, n)
	for i, v := range got {
		require.Equal(t, i, v, "record %d missing or repeated", i)
	}
}

func TestNewRunnerErrors(t *testing.T) {
	plan, _ := load(t, fmt.Sprintf(runnerText, "", "count: 1", -1))
	_, err := pipeline.NewRunner(plan.Spec, pipeline.RunnerOptions{})
	require.ErrorContains(t, err, "needs a state directory")

	plan, _ = load(t, "version: 1\nname: plain\nsources:\n  - id: nums\n    type: seq\n    count: 1\nsinks:\n  - id: out\n    type: collect\n")
	_, err = pipeline.NewRunner(plan.Spec, pipeline.RunnerOptions{FromSavepoint: "sp"})
	require.ErrorContains(t, err, "needs a checkpoint block")
}
