package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// readyz asks GET /readyz of srv.
func readyz(t *testing.T, srv *httptest.Server) (int, Readiness) {
	t.Helper()
	code, body := do(t, http.MethodGet, srv.URL+"/readyz", nil)
	var r Readiness
	require.NoError(t, json.Unmarshal([]byte(body), &r), body)
	require.Equal(t, code == http.StatusOK, r.Ready, "the status code and the body agree: %s", body)
	return code, r
}

// TestReadyTransitions: a pipeline with a checkpoint bound of 10s goes
// starting (not ready) -> running (ready) -> no checkpoint for 11s (not
// ready) -> restarting (not ready) -> running again, the age counted from
// the new job's start (ready) -> stopping (not ready) -> stopped.
func TestReadyTransitions(t *testing.T) {
	target := newFakeTarget(pipeline.RunStarting)
	p := NewPipeline(PipelineOptions{Name: "r", Target: target, Metrics: pipeline.NewMetrics(), Checkpoints: true,
		MaxCheckpointAge: 10 * time.Second, Logger: quietLogger()})
	clock := newFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	p.now = clock.now
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	code, r := readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "starting", r.Status)
	require.Contains(t, r.Reason, "starting")

	target.set(pipeline.RunRunning)
	p.JobStarted()
	clock.add(time.Second)
	code, r = readyz(t, srv)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, Readiness{Ready: true, Status: "running", CheckpointAgeSeconds: ptr(1.0), MaxCheckpointAgeSeconds: 10}, r)

	clock.add(10 * time.Second)
	code, r = readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "running", r.Status)
	require.Equal(t, "checkpoints stall: no checkpoint completed since the job started 11s ago, more than the bound of 10s", r.Reason)
	require.Equal(t, ptr(11.0), r.CheckpointAgeSeconds)

	target.set(pipeline.RunRestarting)
	code, r = readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "the job failed and waits to restart", r.Reason)

	target.set(pipeline.RunRunning)
	p.JobStarted()
	clock.add(9 * time.Second)
	code, _ = readyz(t, srv)
	require.Equal(t, http.StatusOK, code, "a restarted job has the bound's time to checkpoint")

	target.set(pipeline.RunStopping)
	code, r = readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "the run is stopping", r.Reason)
	target.set(pipeline.RunStopped)
	code, r = readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "the run ended: stopped", r.Reason)
}

// TestReadyWithoutBound: without a bound, or without a checkpoint block,
// a running pipeline is ready however long ago it checkpointed.
func TestReadyWithoutBound(t *testing.T) {
	for _, o := range []PipelineOptions{{Checkpoints: true}, {MaxCheckpointAge: time.Second}} {
		o.Name, o.Target, o.Metrics, o.Logger = "r", newFakeTarget(pipeline.RunRunning), pipeline.NewMetrics(), quietLogger()
		p := NewPipeline(o)
		clock := newFakeClock(time.Now())
		p.now = clock.now
		p.JobStarted()
		clock.add(24 * time.Hour)
		srv := httptest.NewServer(p.Handler())
		code, r := readyz(t, srv)
		srv.Close()
		require.Equal(t, http.StatusOK, code)
		require.Nil(t, r.CheckpointAgeSeconds, "not checked")
	}
}

func ptr[T any](v T) *T { return &v }

// checkpointedText is an unbounded pipeline that checkpoints every 20ms.
const checkpointedText = `version: 1
name: ready
checkpoint:
  interval: 20ms
sources:
  - id: numbers
    type: generator
    rate: 2000
    fields:
      i: i
sinks:
  - id: out
    type: blackhole
`

// TestReadyRealRun: the readiness of a real run: not ready before Run
// (starting), ready once its job runs and checkpoints, not ready when the
// clock passes the bound after the newest checkpoint, and not ready once
// stopped.
func TestReadyRealRun(t *testing.T) {
	spec, err := pipeline.Load(pipeline.Default, "ready.yaml", []byte(checkpointedText))
	require.NoError(t, err)
	metrics := pipeline.NewMetrics()
	started := make(chan struct{}, 1)
	var p *Pipeline
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: quietLogger(), Metrics: metrics,
		StateDir: filepath.Join(t.TempDir(), "ready"), OnStart: func(int) {
			p.JobStarted()
			started <- struct{}{}
		}})
	require.NoError(t, err)
	p = NewPipeline(PipelineOptions{Name: "ready", Target: r, Metrics: metrics, Checkpoints: true,
		MaxCheckpointAge: time.Minute, Logger: quietLogger()})
	clock := newFakeClock(time.Now())
	p.now = clock.now
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	code, rd := readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "starting", rd.Status)

	ran := make(chan error, 1)
	go func() { ran <- r.Run(context.Background()) }()
	<-started
	// No event tells of a completed checkpoint: poll the run's statistics.
	tick := time.NewTicker(5 * time.Millisecond)
	for metrics.CheckpointStats().LatestCompleted == nil {
		<-tick.C
	}
	tick.Stop()
	clock.set(time.Now())
	code, rd = readyz(t, srv)
	require.Equal(t, http.StatusOK, code, rd.Reason)
	require.NotNil(t, rd.LastCheckpoint)

	clock.add(2 * time.Minute)
	code, rd = readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Regexp(t, regexp.MustCompile(`^checkpoints stall: the newest checkpoint completed 2m\d+s ago, more than the bound of 1m0s$`), rd.Reason)

	require.NoError(t, r.Stop())
	require.NoError(t, <-ran)
	code, rd = readyz(t, srv)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "stopped", rd.Status)

	code, body := do(t, http.MethodGet, srv.URL+"/api/status", nil)
	require.Equal(t, http.StatusOK, code)
	var st pipeline.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, "ready", st.Pipeline)
	require.Equal(t, "stopped", st.State)
}
