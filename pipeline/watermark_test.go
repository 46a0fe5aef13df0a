package pipeline_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
	"github.com/stretchr/testify/require"
)

func watermarksOf(recs []map[string]any) []int64 {
	var out []int64
	for _, r := range recs {
		if wm, ok := r["wm"]; ok {
			out = append(out, wm.(int64))
		}
	}
	return out
}

func TestWatermarkAfterEveryRecord(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: wm
sources:
  - id: nums
    type: seq
    count: 5
    event_time: "n * 10 - (n % 2) * 15"
    watermark:
      max_out_of_orderness: 10ms
      interval: 0
steps:
  - wmlog: true
sinks:
  - id: out
    type: collect
`)
	run(t, plan)
	// Event times 0, -5, 20, 15, 40: W = max_seen - 10 - 1, never backwards,
	// then +inf at the end of the bounded input.
	require.Equal(t, []int64{-11, 9, 29, math.MaxInt64}, watermarksOf(cols["out"].all()))
	var ts []int64
	for _, r := range cols["out"].all() {
		if v, ok := r["ts"]; ok {
			ts = append(ts, v.(int64))
		}
	}
	require.Equal(t, []int64{0, -5, 20, 15, 40}, ts)
}

func TestWatermarkIsTheMinimumOverInputs(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: wm
sources:
  - id: fast
    type: seq
    count: 5000
    tag: fast
    event_time: n * 100
    watermark: {interval: 0}
  - id: slow
    type: seq
    forever: true
    tag: slow
    event_time: n
    watermark: {interval: 0}
steps:
  - from: [fast, slow]
    wmlog: true
sinks:
  - id: out
    type: collect
`)
	c := cols["out"]
	// Run until the union's watermark passed 500, then cancel: slow never
	// ends (a stop would end its input, and an ended input no longer holds
	// the watermark back).
	job := runUntilWatermark(t, plan, c, 500)
	job.Cancel()
	require.ErrorIs(t, pipelinetest.WaitJob(t, job), context.Canceled)
	// fast runs far ahead (n*100) and ends (+inf); slow never ends. The
	// union's watermark is the minimum: never ahead of what slow has sent.
	slowMax, fastSeen := int64(-1), false
	var wms []int64
	for _, r := range c.all() {
		switch {
		case r["src"] == "slow":
			slowMax = max(slowMax, r["ts"].(int64))
		case r["src"] == "fast":
			fastSeen = true
		default:
			wm := r["wm"].(int64)
			require.LessOrEqual(t, wm, slowMax-1, "watermark %d ran ahead of the slow input", wm)
			wms = append(wms, wm)
		}
	}
	require.True(t, fastSeen)
	require.IsNonDecreasing(t, wms)
}

// runUntilWatermark starts plan and returns once collector c received a
// watermark record past wm; what c receives after that is not waited for.
func runUntilWatermark(t *testing.T, plan *pipeline.Plan, c *collector, wm int64) *pipeline.Job {
	t.Helper()
	c.written = make(chan int, 1<<16)
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{})
	require.NoError(t, err)
	for {
		testkit.WaitFor(t, c.written, "the sink to write")
		wms := watermarksOf(c.all())
		if len(wms) > 0 && wms[len(wms)-1] > wm {
			break
		}
	}
	go func() {
		for range c.written {
		}
	}()
	return job
}

// event_time reads the strings ts_parse reads without a layout (a space
// between date and time, fractional seconds, no zone: UTC). A string that
// is no timestamp fails the record under the source's on_error: the run
// fails by default, and under skip the record is dropped and counted.
func TestEventTimeStrings(t *testing.T) {
	const text = `
version: 1
name: ets
sources:
  - id: nums
    type: seq
    count: 5
    event_time: 'n == 3 ? "yesterday" : "2024-05-01 11:59:5" + string(n) + ".414"'
%s
steps:
  - wmlog: true
sinks:
  - id: out
    type: collect
`
	t.Run("skip", func(t *testing.T) {
		plan, cols := load(t, fmt.Sprintf(text, "    on_error: skip"))
		m := pipeline.NewMetrics()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.NoError(t, pipelinetest.RunJob(ctx, plan, pipeline.JobOptions{Metrics: m}))
		var ts []int64
		for _, r := range cols["out"].all() {
			if v, ok := r["ts"]; ok {
				ts = append(ts, v.(int64))
			}
		}
		base := time.Date(2024, 5, 1, 11, 59, 50, 414e6, time.UTC).UnixMilli()
		require.Equal(t, []int64{base, base + 1000, base + 2000, base + 4000}, ts)
		require.Equal(t, map[string]pipeline.ErrorCounts{"nums": {Skipped: 1}}, m.RecordErrorCounts())
	})
	t.Run("default is fail", func(t *testing.T) {
		plan, _ := load(t, fmt.Sprintf(text, ""))
		err := pipelinetest.RunJob(context.Background(), plan, pipeline.JobOptions{})
		require.ErrorIs(t, err, pipeline.ErrRecordFailed)
		require.ErrorContains(t, err, `record failed in "nums": event_time "n == 3 ? \"yesterday\" : \"2024-05-01 11:59:5\" + string(n) + \".414\"": "yesterday" is not an RFC 3339 timestamp, a date or epoch milliseconds (parse other layouts with ts_parse(field, layout))`)
	})
}
