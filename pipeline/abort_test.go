package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// gateStep holds every batch until its gate opens: a step whose input (and
// the barriers behind it) does not move. With entered (buffered), it
// sends on it, if there is room, each time a batch reaches the gate.
type gateConfig struct {
	Gate    bool `yaml:"gate"`
	open    chan struct{}
	entered chan struct{}
}

func (c *gateConfig) Validate() error { return nil }
func (c *gateConfig) NewOperator() (pipeline.Operator, error) {
	return &gateOp{open: c.open, entered: c.entered}, nil
}

type gateOp struct{ open, entered chan struct{} }

func (o *gateOp) Open(context.Context, *pipeline.OperatorContext) error { return nil }
func (o *gateOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	select {
	case o.entered <- struct{}{}:
	default:
	}
	<-o.open
	return out.Emit(in)
}
func (o *gateOp) Close() error { return nil }

// loadGated loads a pipeline name with the checkpoint block checkpoint:
// two sources, stuck behind a gate step and moving, joined by one task,
// into a collect sink, which it returns.
func loadGated(t *testing.T, name, checkpoint string, gate, entered chan struct{}) (*pipeline.Plan, *collector) {
	t.Helper()
	env := testEnv()
	env.RegisterStep(pipeline.StepPlugin{Kind: "gate", New: func() pipeline.StepConfig {
		return &gateConfig{open: gate, entered: entered}
	}})
	spec, err := pipeline.Load(env, name+".yaml", fmt.Appendf(nil, `version: 1
name: %s
parallelism: 1
checkpoint: %s
sources:
  - { id: stuck, type: seq, forever: true, tag: a }
  - { id: moving, type: seq, forever: true, pace: true, tag: b }
steps:
  - { id: held, from: stuck, gate: true }
  - { id: both, from: [held, moving], pass: null }
sinks:
  - { id: out, from: both, type: collect }
`, name, checkpoint))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	col := newCollector()
	spec.Sinks[0].Config.(*collectConfig).c = col
	return plan, col
}

// An aborted checkpoint releases the inputs a task held for its alignment:
// the barrier of one input is stuck behind a step that does not move, the
// checkpoint times out, and the other input flows again (Flink's
// notifyCheckpointAborted). Without the release it would wait for good.
// The checkpoint interval and timeout run on a synctest bubble's fake clock.
func TestAbortedCheckpointReleasesAlignment(t *testing.T) {
	synctest.Test(t, testAbortedCheckpointReleasesAlignment)
}

func testAbortedCheckpointReleasesAlignment(t *testing.T) {
	gate := make(chan struct{})
	plan, col := loadGated(t, "abort", "{interval: 20ms, timeout: 100ms, tolerable_failures: 1000}", gate, nil)
	fromMoving := func() int {
		n := 0
		for _, r := range col.all() {
			if r["src"] == "b" {
				n++
			}
		}
		return n
	}

	failed := newLogLines("checkpoint failed")
	metrics := pipeline.NewMetrics()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job, err := pipeline.Start(ctx, plan, pipeline.JobOptions{Store: pipelinetest.NewMemStore(), Logger: slog.New(failed), Metrics: metrics})
	require.NoError(t, err)
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer func() {
		release()
		job.Cancel()
		_ = pipelinetest.WaitJob(t, job)
	}()

	// Each aborted checkpoint lets the moving input's records behind its
	// barrier through, until the next barrier holds it again. The count at
	// the first failure may already include the first release (the abort
	// races the log line), so look three aborts later.
	first := testkit.WaitFor(t, failed.lines, "a checkpoint to fail")["checkpoint"].Int64()
	before := fromMoving()
	seen := 1
	for {
		l := testkit.WaitFor(t, failed.lines, "more checkpoints to fail")
		seen++
		if l["checkpoint"].Int64() >= first+3 {
			break
		}
	}
	require.Greater(t, fromMoving(), before,
		"records of the moving input behind the barriers of aborted checkpoints must flow")
	// Each failure is counted before its log line.
	reg := metrics.Registry
	require.GreaterOrEqual(t, gathered(t, reg, "eddy_checkpoints_total", "kind", "checkpoint", "result", "failed").GetCounter().GetValue(), float64(seen))
	require.Zero(t, gathered(t, reg, "eddy_checkpoints_total", "kind", "checkpoint", "result", "completed").GetCounter().GetValue())
	require.Zero(t, gathered(t, reg, "eddy_checkpoint_last_completed_id").GetGauge().GetValue())
	stats := metrics.CheckpointStats()
	require.Nil(t, stats.LatestCompleted)
	require.NotNil(t, stats.LatestFailed)
	require.Contains(t, stats.LatestFailed.Error, "timed out after 100ms")
	require.Less(t, stats.LatestFailed.Acknowledged, stats.LatestFailed.Tasks, "the stuck task never acknowledged")
	for _, r := range stats.History {
		require.Equal(t, "failed", r.Status, "checkpoint %d", r.ID)
	}
}
