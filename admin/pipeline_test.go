package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

func newTestPipeline(t *testing.T, target Target) *Pipeline {
	return NewPipeline(PipelineOptions{Name: "idx", Target: target, Metrics: pipeline.NewMetrics(),
		SavepointDir: t.TempDir(), Logger: quietLogger()})
}

// TestIndex: GET / lists every endpoint, and every endpoint listed is
// served; other paths are not found.
func TestIndex(t *testing.T) {
	srv := httptest.NewServer(newTestPipeline(t, newFakeTarget(pipeline.RunRunning)).Handler())
	defer srv.Close()

	code, body := do(t, http.MethodGet, srv.URL+"/", nil)
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "eddy admin endpoint of pipeline idx\n\n"), body)
	for _, e := range Endpoints {
		require.Contains(t, body, e.Pattern+" ", "GET / does not list %s", e.Pattern)
		method, path, _ := strings.Cut(e.Pattern, " ")
		code, _ := do(t, method, srv.URL+path, nil)
		require.NotContains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, code, "%s is listed but not served", e.Pattern)
	}
	code, _ = do(t, http.MethodGet, srv.URL+"/nope", nil)
	require.Equal(t, http.StatusNotFound, code, "only / itself is the list")
	code, _ = do(t, http.MethodGet, srv.URL+"/ui/app.js", nil)
	require.Equal(t, http.StatusNotFound, code, "no UI is built in")
}

// TestIndexUI: with a UI built in, a browser gets it at GET / and under
// /ui/; curl still gets the list.
func TestIndexUI(t *testing.T) {
	UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "dashboard "+r.URL.Path) })
	defer func() { UI = nil }()
	srv := httptest.NewServer(newTestPipeline(t, newFakeTarget(pipeline.RunRunning)).Handler())
	defer srv.Close()

	_, body := do(t, http.MethodGet, srv.URL+"/", nil, "Accept", "text/html,application/xhtml+xml")
	require.Equal(t, "dashboard /", body)
	_, body = do(t, http.MethodGet, srv.URL+"/ui/app.js", nil)
	require.Equal(t, "dashboard /ui/app.js", body)
	_, body = do(t, http.MethodGet, srv.URL+"/", nil, "Accept", "*/*")
	require.True(t, strings.HasPrefix(body, "eddy admin endpoint of pipeline idx\n"), body)
}

// TestHealthz: 200 while running or stopping (and once ended, as
// stopping), 503 while starting or restarting; the JSON names the state.
func TestHealthz(t *testing.T) {
	target := newFakeTarget(pipeline.RunStarting)
	srv := httptest.NewServer(newTestPipeline(t, target).Handler())
	defer srv.Close()
	for _, tt := range []struct {
		state  pipeline.RunState
		code   int
		status string
	}{
		{pipeline.RunStarting, 503, "starting"},
		{pipeline.RunRunning, 200, "running"},
		{pipeline.RunRestarting, 503, "restarting"},
		{pipeline.RunStopping, 200, "stopping"},
		{pipeline.RunFailed, 200, "stopping"},
	} {
		target.set(tt.state)
		code, body := do(t, http.MethodGet, srv.URL+"/healthz", nil)
		require.Equal(t, tt.code, code, tt.state.String())
		require.JSONEq(t, fmt.Sprintf(`{"status":%q}`, tt.status), body)
	}
}

// TestPostSavepoints: POST /savepoints answers the savepoint as JSON, or
// the failure with its status code; ?stop=true stops with it; ?dir= names
// the directory.
func TestPostSavepoints(t *testing.T) {
	target := newFakeTarget(pipeline.RunRunning)
	p := newTestPipeline(t, target)
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	target.sp = pipeline.Savepoint{ID: 7, Path: "/sp/savepoint-7.db"}

	code, body := do(t, http.MethodPost, srv.URL+"/savepoints", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"id":7,"path":"/sp/savepoint-7.db","final":false}`, body)
	other := t.TempDir()
	code, body = do(t, http.MethodPost, srv.URL+"/savepoints?stop=true&dir="+other, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"id":7,"path":"/sp/savepoint-7.db","final":true}`, body)
	require.Equal(t, []string{p.opts.SavepointDir, other}, target.dirs)
	require.Equal(t, 1, target.stops)

	code, body = do(t, http.MethodPost, srv.URL+"/savepoints?stop=maybe", nil)
	require.Equal(t, http.StatusBadRequest, code)
	require.JSONEq(t, `{"error":"stop=\"maybe\": want true or false"}`, body)
	for _, tt := range []struct {
		err  error
		code int
	}{
		{pipeline.ErrRestarting, http.StatusServiceUnavailable},
		{pipeline.ErrStopping, http.StatusConflict},
		{pipeline.ErrJobEnding, http.StatusConflict},
		{pipeline.ErrNoCheckpoints, http.StatusConflict},
		{errUnexpected, http.StatusInternalServerError},
	} {
		target.err = tt.err
		code, body := do(t, http.MethodPost, srv.URL+"/savepoints", nil)
		require.Equal(t, tt.code, code, tt.err.Error())
		var e ErrorReply
		require.NoError(t, json.Unmarshal([]byte(body), &e))
		require.Equal(t, tt.err.Error(), e.Error)
	}
}

// TestGetSavepointsAndCheckpoints: the JSON shapes of GET /savepoints (a
// missing directory has none) and GET /checkpoints (nothing yet).
func TestGetSavepointsAndCheckpoints(t *testing.T) {
	p := NewPipeline(PipelineOptions{Name: "sp", Target: newFakeTarget(pipeline.RunRunning), Metrics: pipeline.NewMetrics(),
		SavepointDir: "/nowhere/savepoints", Logger: quietLogger()})
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	code, body := do(t, http.MethodGet, srv.URL+"/savepoints", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"pipeline":"sp","dir":"/nowhere/savepoints","savepoints":[]}`, body)
	code, body = do(t, http.MethodGet, srv.URL+"/checkpoints", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"restored":null,"in_progress":[],"history":[],"latest_completed":null,"latest_failed":null}`, body)
	code, body = do(t, http.MethodGet, srv.URL+"/api/status", nil)
	require.Equal(t, http.StatusNotImplemented, code, "a target without a status: %s", body)
}

// boundedText is a pipeline that reads 500 records and ends, with a
// final checkpoint.
const boundedText = `version: 1
name: bounded
checkpoint:
  interval: 1h
sources:
  - id: numbers
    type: generator
    count: 500
    fields:
      i: i
steps:
  - id: odd
    filter: i % 2 == 1
sinks:
  - id: out
    type: blackhole
`

// TestEndpointsAfterKnownRun: after a run of 500 records, 250 of them
// odd, /metrics, /checkpoints, /api/status and /healthz say so.
func TestEndpointsAfterKnownRun(t *testing.T) {
	spec, err := pipeline.Load(pipeline.Default, "bounded.yaml", []byte(boundedText))
	require.NoError(t, err)
	metrics := pipeline.NewMetrics()
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: quietLogger(), Metrics: metrics,
		StateDir: filepath.Join(t.TempDir(), "bounded")})
	require.NoError(t, err)
	p := NewPipeline(PipelineOptions{Name: "bounded", Target: r, Metrics: metrics, Checkpoints: true, Logger: quietLogger()})
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	require.NoError(t, r.Run(context.Background()))

	code, body := do(t, http.MethodGet, srv.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`eddy_records_out_total{id="numbers",subtask="0"} 500`,
		`eddy_records_in_total{id="odd",subtask="0"} 500`,
		`eddy_records_out_total{id="odd",subtask="0"} 250`,
		`eddy_records_in_total{id="out",subtask="0"} 250`,
		`eddy_checkpoints_total{kind="checkpoint",result="completed"} 1`,
	} {
		require.Contains(t, body, want+"\n")
	}
	code, body = do(t, http.MethodGet, srv.URL+"/checkpoints", nil)
	require.Equal(t, http.StatusOK, code)
	var cs pipeline.CheckpointStats
	require.NoError(t, json.Unmarshal([]byte(body), &cs))
	require.NotNil(t, cs.LatestCompleted, body)
	require.True(t, cs.LatestCompleted.Final, "the final checkpoint at the end of input")
	require.Len(t, cs.History, 1)

	code, body = do(t, http.MethodGet, srv.URL+"/api/status", nil)
	require.Equal(t, http.StatusOK, code)
	var st pipeline.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, "finished", st.State)
	require.Equal(t, []string{"numbers", "odd", "out"}, []string{st.Nodes[0].ID, st.Nodes[1].ID, st.Nodes[2].ID})
	code, body = do(t, http.MethodGet, srv.URL+"/healthz", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"stopping"}`, body, "an ended run is on its way out")
}
