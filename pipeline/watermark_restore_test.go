package pipeline_test

import (
	"context"
	"encoding/binary"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// A restored source starts from the watermark of the checkpoint: what was
// late before the crash is late after it, and the watermark downstream
// never goes back. The odd records are 50ms behind the even ones, so a
// source that restarted from nothing would first emit a watermark below
// the one of the checkpoint. In a synctest bubble, the test's polling and
// the source's pace run on the fake clock.
func TestRestoreKeepsTheSourceWatermark(t *testing.T) {
	synctest.Test(t, testRestoreKeepsTheSourceWatermark)
}

func testRestoreKeepsTheSourceWatermark(t *testing.T) {
	text := `
version: 1
name: wm
checkpoint:
  interval: 5ms
sources:
  - id: nums
    type: seq
    forever: true
    event_time: 'n % 2 == 0 ? n : n - 50'
    watermark: { interval: 0 }
steps:
  - id: log
    wmlog: true
sinks:
  - id: out
    type: collect
`
	store := pipelinetest.NewMemStore()
	plan, _ := load(t, text)
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: store})
	require.NoError(t, err)
	for store.Count() < 2 {
		select {
		case <-job.Done():
			require.FailNow(t, "the unbounded job ended", "%v", job.Wait())
		case <-time.After(time.Millisecond):
		}
	}
	job.Cancel()
	_ = pipelinetest.WaitJob(t, job)

	restored := store.Latest()
	b, err := restored.Get("wm/nums/0")
	require.NoError(t, err, "the checkpoint holds the source's watermark")
	wm := int64(binary.BigEndian.Uint64(b))
	require.Positive(t, wm)

	plan, cols := load(t, text)
	job, err = pipeline.Start(context.Background(), plan, pipeline.JobOptions{Store: pipelinetest.NewMemStore(), Restore: restored})
	require.NoError(t, err)
	var wms []int64
	for len(wms) < 50 {
		select {
		case <-job.Done():
			require.FailNow(t, "the unbounded job ended", "%v", job.Wait())
		case <-time.After(time.Millisecond):
		}
		wms = watermarksOf(cols["out"].all())
	}
	job.Cancel()
	_ = pipelinetest.WaitJob(t, job)
	require.Equal(t, wm, wms[0], "the first watermark after the restore is the checkpoint's")
	for _, w := range wms {
		require.GreaterOrEqual(t, w, wm, "a watermark below the checkpoint's after the restore")
	}
}
