package pipeline_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// logLines is a slog handler that sends the attributes of each line whose
// message is msg.
type logLines struct {
	msg   string
	lines chan map[string]slog.Value
}

func newLogLines(msg string) logLines {
	return logLines{msg: msg, lines: make(chan map[string]slog.Value, 1024)}
}

func (h logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h logLines) Handle(_ context.Context, r slog.Record) error {
	if r.Message != h.msg {
		return nil
	}
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value
		return true
	})
	h.lines <- attrs
	return nil
}
func (h logLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logLines) WithGroup(string) slog.Handler      { return h }

// gathered returns the series of metric name in reg whose labels include
// labels (name, value pairs); it fails the test when there is none.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m
		}
	}
	t.Fatalf("no series %s %v", name, labels)
	return nil
}

// TestCheckpointMetrics: every completed checkpoint is counted, with its
// duration, and the gauges describe the newest one, as its log line does;
// no checkpoint failed, none is in progress once the job ended.
func TestCheckpointMetrics(t *testing.T) {
	plan, _ := load(t, `
version: 1
name: metrics
checkpoint: { interval: 5ms }
sources: [{id: nums, type: seq, forever: true, keys: 7, pace: true}]
steps: [{id: counts, count_by: k}]
sinks: [{id: out, type: collect}]
`)
	complete := newLogLines("checkpoint complete")
	metrics := pipeline.NewMetrics()
	started := time.Now()
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{
		Store: pipelinetest.NewMemStore(), Logger: slog.New(complete), Metrics: metrics})
	require.NoError(t, err)
	var lines []map[string]slog.Value
	for len(lines) < 3 {
		select {
		case l := <-complete.lines:
			lines = append(lines, l)
		case <-job.Done():
			t.Fatalf("the job ended: %v", job.Wait())
		}
	}
	job.Stop()
	require.NoError(t, pipelinetest.WaitJob(t, job))
	ended := time.Now()
	for len(complete.lines) > 0 {
		lines = append(lines, <-complete.lines)
	}

	reg := metrics.Registry
	count := func(kind, result string) float64 {
		return gathered(t, reg, "eddy_checkpoints_total", "kind", kind, "result", result).GetCounter().GetValue()
	}
	require.Equal(t, float64(len(lines)), count("checkpoint", "completed"), "one per checkpoint complete line")
	for _, r := range []string{"failed", "subsumed"} {
		require.Zero(t, count("checkpoint", r), r)
	}
	for _, r := range []string{"completed", "failed", "subsumed"} {
		require.Zero(t, count("savepoint", r), r)
	}
	h := gathered(t, reg, "eddy_checkpoint_duration_seconds", "kind", "checkpoint").GetHistogram()
	require.Equal(t, uint64(len(lines)), h.GetSampleCount())
	require.Less(t, h.GetSampleSum(), ended.Sub(started).Seconds()*float64(len(lines)))
	require.Zero(t, gathered(t, reg, "eddy_checkpoints_in_progress").GetGauge().GetValue())

	newest := lines[0]
	for _, l := range lines {
		if l["checkpoint"].Int64() > newest["checkpoint"].Int64() {
			newest = l
		}
	}
	require.Equal(t, float64(newest["checkpoint"].Int64()), gathered(t, reg, "eddy_checkpoint_last_completed_id").GetGauge().GetValue())
	require.Positive(t, newest["state_bytes"].Int64(), "the keyed step has state")
	require.Equal(t, float64(newest["state_bytes"].Int64()), gathered(t, reg, "eddy_checkpoint_last_state_bytes").GetGauge().GetValue())
	at := gathered(t, reg, "eddy_checkpoint_last_completed_timestamp_seconds").GetGauge().GetValue()
	require.GreaterOrEqual(t, at, float64(started.UnixNano())/1e9)
	require.LessOrEqual(t, at, float64(ended.UnixNano())/1e9)
	require.Zero(t, gathered(t, reg, "eddy_restarts_total").GetCounter().GetValue())

	// The history: the last ten, newest first, as their log lines.
	stats := metrics.CheckpointStats()
	require.Empty(t, stats.InProgress)
	require.Nil(t, stats.LatestFailed)
	require.Nil(t, stats.Restored, "the job started empty")
	require.Zero(t, gathered(t, reg, "eddy_checkpoint_restored_id").GetGauge().GetValue())
	require.Len(t, stats.History, min(len(lines), 10))
	byID := map[int64]map[string]slog.Value{}
	for _, l := range lines {
		byID[l["checkpoint"].Int64()] = l
	}
	for i, r := range stats.History {
		if i > 0 {
			require.Less(t, r.ID, stats.History[i-1].ID, "newest first")
		}
		l := byID[r.ID]
		require.NotNil(t, l, "checkpoint %d has no log line", r.ID)
		require.Equal(t, "checkpoint", r.Kind)
		require.Equal(t, "completed", r.Status)
		require.Equal(t, l["state_bytes"].Int64(), r.StateBytes)
		require.Equal(t, l["final"].Bool(), r.Final)
		require.Equal(t, r.Tasks, r.Acknowledged)
		require.Empty(t, r.Error)
		require.False(t, r.Triggered.Before(started) || r.Triggered.After(ended), "triggered %s", r.Triggered)
	}
	require.Equal(t, stats.History[0], *stats.LatestCompleted)
	require.Equal(t, newest["checkpoint"].Int64(), stats.LatestCompleted.ID)
}

// TestTaskCheckpointGauges: a savepoint's barrier waits behind a batch
// that a gate holds for hold. The gated source's task takes its barrier
// only after the gate opens (its start delay is at least hold), and the
// task that joins both sources gets the gated one's barrier last (its
// start delay and alignment add up to at least hold).
func TestTaskCheckpointGauges(t *testing.T) {
	gate, entered := make(chan struct{}), make(chan struct{}, 1)
	plan, _ := loadGated(t, "gauges", "{interval: 1h}", gate, entered)
	triggered := newLogLines("checkpoint triggered")
	metrics := pipeline.NewMetrics()
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{
		Store: newRecStore(t, 3), Logger: slog.New(triggered), Metrics: metrics})
	require.NoError(t, err)
	defer func() {
		job.Cancel()
		_ = pipelinetest.WaitJob(t, job)
	}()

	testkit.WaitFor(t, entered, "the stuck source's task to enter the gate")
	result := make(chan error, 1)
	go func() {
		_, err := job.TriggerSavepoint(context.Background(), t.TempDir())
		result <- err
	}()
	testkit.WaitFor(t, triggered.lines, "the savepoint to be triggered")
	const hold = 50 * time.Millisecond
	time.Sleep(hold) // what the gauges measure, not a synchronisation
	close(gate)
	require.NoError(t, testkit.WaitFor(t, result, "the savepoint"))

	gauge := func(name, task string) float64 {
		return gathered(t, metrics.Registry, name, "id", task, "subtask", "0").GetGauge().GetValue()
	}
	require.GreaterOrEqual(t, gauge("eddy_checkpoint_start_delay_seconds", "stuck"), hold.Seconds())
	require.Zero(t, gauge("eddy_checkpoint_alignment_seconds", "stuck"), "a source task has no inputs to align")
	require.GreaterOrEqual(t, gauge("eddy_checkpoint_start_delay_seconds", "both")+gauge("eddy_checkpoint_alignment_seconds", "both"), hold.Seconds())
	// Its two barriers arrived one after the other, whatever their order.
	require.Positive(t, gauge("eddy_checkpoint_alignment_seconds", "both"))
	for _, task := range []string{"stuck", "moving", "both"} {
		require.GreaterOrEqual(t, gauge("eddy_checkpoint_start_delay_seconds", task), 0.0, task)
		require.Positive(t, gauge("eddy_checkpoint_sync_seconds", task), task)
	}
}

// RecordErrorCounts sums eddy_record_errors_total per id over subtasks and
// keeps apart what each policy did; ids without errors are absent.
func TestRecordErrorCounts(t *testing.T) {
	m := pipeline.NewMetrics()
	info := func(id string, sub int) pipeline.SubtaskInfo {
		return pipeline.SubtaskInfo{ID: id, Subtask: sub, Parallelism: 2}
	}
	m.RecordErrors(info("a", 0), pipeline.OnErrorSkip).Add(2)
	m.RecordErrors(info("a", 1), pipeline.OnErrorSkip).Add(3)
	m.RecordErrors(info("b", 1), pipeline.OnErrorDeadLetter).Inc()
	m.RecordErrors(info("c", 0), pipeline.OnErrorFail).Inc()
	m.RecordErrors(info("d", 0), pipeline.OnErrorSkip) // a series without errors
	got := m.RecordErrorCounts()
	require.Equal(t, map[string]pipeline.ErrorCounts{
		"a": {Skipped: 5},
		"b": {DeadLettered: 1},
		"c": {Failed: 1},
	}, got)
	require.Equal(t, int64(5), got["a"].Total())
}
