package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// The runtime's timer-driven behaviour, tested in testing/synctest bubbles:
// inside one the runtime's timers, tickers and time.Now run on a fake clock
// that moves only when every goroutine of the bubble is blocked. A test
// sleeps to the millisecond before and after a deadline, synctest.Wait lets
// the job settle, and the test asserts what happened by then; none takes
// wall-clock time.

// startJob starts plan in a bubble; when the test ends, the job is
// cancelled and waited for, so that a failed assertion leaves no goroutine
// of the bubble blocked.
func startJob(t *testing.T, plan *pipeline.Plan, opts pipeline.JobOptions) *pipeline.Job {
	t.Helper()
	job, err := pipeline.Start(context.Background(), plan, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		job.Cancel()
		_ = job.Wait()
	})
	return job
}

// A partly filled batch waits for the buffer timeout, then goes out: a
// quiet stream still flows.
func TestBufferTimeoutFlushesAQuietStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		plan, cols := load(t, `
version: 1
name: buffered
runtime:
  chaining: false
  buffer_timeout: 1s
sources:
  - id: nums
    type: seq
    count: 5
    hold: true
sinks:
  - id: out
    type: collect
`)
		job := startJob(t, plan, pipeline.JobOptions{})
		synctest.Wait()
		require.Empty(t, cols["out"].all(), "5 records wait in a batch of 1024")
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		require.Empty(t, cols["out"].all(), "1ms before the buffer timeout")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Len(t, cols["out"].all(), 5, "at the buffer timeout the batch went out")
		job.Stop()
		require.NoError(t, pipelinetest.WaitJob(t, job))
	})
}

// Periodic checkpoints are triggered every interval.
func TestCheckpointInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		plan, _ := load(t, `
version: 1
name: periodic
checkpoint:
  interval: 1s
sources:
  - id: nums
    type: seq
    count: 5
    hold: true
sinks:
  - id: out
    type: collect
`)
		store := pipelinetest.NewMemStore()
		start := time.Now()
		job := startJob(t, plan, pipeline.JobOptions{Store: store})
		for n := range 4 {
			synctest.Wait()
			require.Equal(t, n, store.Count(), "checkpoints completed after %s", time.Since(start))
			time.Sleep(time.Second - time.Millisecond)
			synctest.Wait()
			require.Equal(t, n, store.Count(), "checkpoints completed after %s", time.Since(start))
			time.Sleep(time.Millisecond)
		}
		job.Cancel()
		require.ErrorIs(t, pipelinetest.WaitJob(t, job), context.Canceled)
		for id := int64(1); id <= 3; id++ {
			require.Equal(t, time.Duration(id)*time.Second, store.Meta(id).Time.Sub(start), "checkpoint %d triggered", id)
		}
	})
}

// When every input of a task is idle, none holds the watermark back: it
// advances to the highest of theirs. Here busy reaches 48 and goes idle
// while quiet, which read nothing, holds the minimum; once quiet is idle
// too, busy's 48 goes through (without that, it never would).
func TestAllInputsIdleReleaseTheHighestWatermark(t *testing.T) {
	requireIdleRelease(t, "1s", "2s", 2*time.Second,
		"quiet holds the watermark back, busy being idle", "every input is idle: the highest watermark goes through")
}

// A source that reads nothing holds the watermark back until its
// idle_timeout passed, then no longer does.
func TestIdleSourceDoesNotHoldTheWatermark(t *testing.T) {
	requireIdleRelease(t, "0s", "1s", time.Second,
		"quiet holds the watermark back before its idle timeout", "quiet is idle: busy's watermark goes through")
}

// requireIdleRelease runs busy (n = 0..49 as event time, then nothing)
// and quiet (no record) into one step, with the given watermark
// idle_timeout of each, and requires the step to see no watermark before
// releaseAt (held) and then busy's, 49 - 1 (released).
func requireIdleRelease(t *testing.T, busyIdle, quietIdle string, releaseAt time.Duration, held, released string) {
	synctest.Test(t, func(t *testing.T) {
		plan, cols := load(t, fmt.Sprintf(`
version: 1
name: idle
sources:
  - id: busy
    type: seq
    count: 50
    hold: true
    event_time: n
    watermark: {interval: 5ms, idle_timeout: %s}
  - id: quiet
    type: seq
    silent: true
    event_time: n
    watermark: {interval: 5ms, idle_timeout: %s}
steps:
  - from: [busy, quiet]
    wmlog: true
sinks:
  - id: out
    type: collect
`, busyIdle, quietIdle))
		job := startJob(t, plan, pipeline.JobOptions{})
		time.Sleep(releaseAt - time.Millisecond)
		synctest.Wait()
		require.Empty(t, watermarksOf(cols["out"].all()), held)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, []int64{48}, watermarksOf(cols["out"].all()), released)
		job.Stop()
		require.NoError(t, pipelinetest.WaitJob(t, job))
	})
}

// tickStep asks for a processing-time wake-up every `tick` and emits
// {"tick": now} at each.
type tickConfig struct {
	Every pipeline.Duration `yaml:"tick"`
}

func (c *tickConfig) Validate() error { return nil }
func (c *tickConfig) NewOperator() (pipeline.Operator, error) {
	return &tickOp{every: c.Every.Millis()}, nil
}

type tickOp struct {
	every int64
	oc    *pipeline.OperatorContext
}

func (o *tickOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	o.oc = oc
	oc.WakeAt(oc.Now() + o.every)
	return nil
}
func (o *tickOp) Process(in []pipeline.Record, out pipeline.Emitter) error { return out.Emit(in) }
func (o *tickOp) OnProcessingTime(now int64, out pipeline.Emitter) error {
	o.oc.WakeAt(now + o.every)
	return out.Emit([]pipeline.Record{pipeline.NewRecord(map[string]any{"tick": now})})
}
func (o *tickOp) Close() error { return nil }

// An operator's processing-time wake-up (WakeAt) calls OnProcessingTime
// when its time comes, on a stream that carries nothing.
func TestProcessingTimeWakeUps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testEnv()
		env.RegisterStep(pipeline.StepPlugin{Kind: "tick", New: func() pipeline.StepConfig { return &tickConfig{} }})
		spec, err := pipeline.Load(env, "tick.yaml", []byte(`
version: 1
name: ticks
sources:
  - id: quiet
    type: seq
    silent: true
steps:
  - tick: 1s
sinks:
  - id: out
    type: collect
`))
		require.NoError(t, err)
		col := newCollector()
		spec.Sinks[0].Config.(*collectConfig).c = col
		plan, err := pipeline.Compile(spec)
		require.NoError(t, err)
		start := time.Now().UnixMilli()
		job := startJob(t, plan, pipeline.JobOptions{})
		ticks := func() []int64 {
			var out []int64
			for _, r := range col.all() {
				out = append(out, r["tick"].(int64)-start)
			}
			return out
		}
		time.Sleep(3*time.Second - time.Millisecond)
		synctest.Wait()
		require.Equal(t, []int64{1000, 2000}, ticks())
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, []int64{1000, 2000, 3000}, ticks())
		job.Stop()
		require.NoError(t, pipelinetest.WaitJob(t, job))
	})
}
