package pipeline_test

import (
	"context"
	"math"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
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
    count: 50
    event_time: n * 100
    watermark: {interval: 0}
  - id: slow
    type: seq
    count: 10
    event_time: n
    watermark: {interval: 0}
steps:
  - from: [fast, slow]
    wmlog: true
sinks:
  - id: out
    type: collect
`)
	run(t, plan)
	wms := watermarksOf(cols["out"].all())
	require.NotEmpty(t, wms)
	require.IsNonDecreasing(t, wms)
	require.Equal(t, int64(math.MaxInt64), wms[len(wms)-1])
	// Were the union's watermark the maximum (or fast's), fast's watermarks
	// (100n-1) would pass 8 before slow's last one (9-1 = 8) shows, and
	// never-backwards would hide 8. The minimum shows every slow watermark.
	require.Contains(t, wms, int64(8))
	for _, wm := range wms[:len(wms)-1] {
		require.True(t, wm <= 8 || (wm+1)%100 == 0, "watermark %d is neither slow's nor fast's", wm)
	}
}

func TestIdleSourceDoesNotHoldTheWatermark(t *testing.T) {
	plan, cols := load(t, `
version: 1
name: idle
sources:
  - id: busy
    type: seq
    forever: true
    event_time: n
    watermark: {interval: 5ms}
  - id: quiet
    type: seq
    silent: true
    event_time: n
    watermark: {interval: 5ms, idle_timeout: 20ms}
steps:
  - from: [busy, quiet]
    wmlog: true
sinks:
  - id: out
    type: collect
`)
	c := cols["out"]
	c.written = make(chan int, 1<<16)
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{})
	require.NoError(t, err)
	// quiet never read a record: it is idle at once and busy's watermark
	// goes through. Wait for a watermark past 1000.
	for {
		<-c.written
		wms := watermarksOf(c.all())
		if len(wms) > 0 && wms[len(wms)-1] > 1000 {
			break
		}
	}
	job.Stop()
	go func() {
		for range c.written {
		}
	}()
	require.NoError(t, job.Wait())
}
