package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// fileSinkText is a checkpointed unbounded pipeline NAME that writes
// files into OUT.
const fileSinkText = `version: 1
name: NAME
checkpoint:
  interval: 20ms
sources:
  - id: numbers
    type: generator
    rate: 200
    fields:
      i: i
sinks:
  - id: out
    type: file
    path: OUT
`

func fileSink(name, out string) string {
	return strings.NewReplacer("NAME", name, "OUT", out).Replace(fileSinkText)
}

// api sends a request to the REST interface with the token.
type api struct {
	t     *testing.T
	url   string
	token string
}

func (a api) do(method, path, body string) (int, string) {
	a.t.Helper()
	var r *strings.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	if r == nil {
		return do(a.t, method, a.url+path, nil, "Authorization", "Bearer "+a.token)
	}
	return do(a.t, method, a.url+path, r, "Authorization", "Bearer "+a.token)
}

// decode decodes body into a new T.
func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(body), &v), body)
	return v
}

// TestServeREST: the REST interface of eddy serve: list, add (validated,
// paths confined, size-limited), the pipelines' own endpoints, the merged
// metrics, readiness, stop with a savepoint, restart from it, delete.
func TestServeREST(t *testing.T) {
	const token = "serve-token-0123"
	f := newServe(t, map[string]string{"steady.yaml": keyed("steady", "totals", ""), "failing.yaml": failingText})
	srv := httptest.NewServer(Guard(f.m.Handler(), token))
	defer srv.Close()
	a := api{t: t, url: srv.URL, token: token}
	f.waitState("steady", "running")
	f.waitState("failing", "failed")

	// The index lists every request, and the GET ones are served.
	code, body := a.do(http.MethodGet, "/", "")
	require.Equal(t, http.StatusOK, code)
	for _, e := range ServeEndpoints {
		require.Contains(t, body, e.Pattern+" ")
		method, path, _ := strings.Cut(strings.ReplaceAll(e.Pattern, "{name}", "steady"), " ")
		if method == http.MethodGet {
			code, _ := a.do(method, path, "")
			want := http.StatusOK
			if path == "/readyz" {
				want = http.StatusServiceUnavailable // failing
			}
			require.Equal(t, want, code, "%s", e.Pattern)
		}
	}
	for _, e := range pipelineEndpoints() {
		require.Contains(t, body, e.Pattern+" ")
	}

	code, body = a.do(http.MethodGet, "/api/pipelines", "")
	require.Equal(t, http.StatusOK, code)
	list := decode[PipelineList](t, body)
	require.Equal(t, f.dir, list.Dir)
	require.Len(t, list.Pipelines, 2)
	require.Equal(t, PipelineRow{Name: "failing", File: filepath.Join(f.dir, "failing.yaml"), State: "failed", URL: "/pipelines/failing/",
		Error: list.Pipelines[0].Error}, list.Pipelines[0])
	require.Contains(t, list.Pipelines[0].Error, "integer divide by zero")
	require.Equal(t, PipelineRow{Name: "steady", File: filepath.Join(f.dir, "steady.yaml"), State: "running", Ready: true,
		URL: "/pipelines/steady/"}, list.Pipelines[1])

	// Adding a pipeline needs the token.
	upload := fileSink("uploaded", filepath.Join(f.data, "out")+"/")
	code, body = do(t, http.MethodPost, srv.URL+"/api/pipelines", strings.NewReader(upload))
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = a.do(http.MethodPost, "/api/pipelines", upload)
	require.Equal(t, http.StatusCreated, code, body)
	row := decode[PipelineRow](t, body)
	require.Equal(t, "uploaded", row.Name)
	written, err := os.ReadFile(filepath.Join(f.dir, "uploaded.yaml"))
	require.NoError(t, err)
	require.Equal(t, upload, string(written))
	f.waitState("uploaded", "running")

	code, body = a.do(http.MethodPost, "/api/pipelines", upload)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "add ?replace=true to replace it")
	f.waitCheckpoint("uploaded")
	first := f.run("uploaded")
	code, body = a.do(http.MethodPost, "/api/pipelines?replace=true", upload+"# the same, with a comment\n")
	require.Equal(t, http.StatusOK, code, body)
	row = decode[PipelineRow](t, body)
	require.Empty(t, row.Reason, "replaced")
	require.NotSame(t, first, f.run("uploaded"), "a new run, from a savepoint of the first")
	require.True(t, first.ended())
	f.waitState("uploaded", "running")

	code, body = a.do(http.MethodPost, "/api/pipelines", brokenText)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, ProblemsReply{Error: "the pipeline file is invalid", Problems: []ProblemReply{
		{File: "upload.yaml", Line: 6, Col: 5, Message: `unknown key "colour" in source "numbers" (generator)`}}},
		decode[ProblemsReply](t, body))

	code, body = a.do(http.MethodPost, "/api/pipelines", fileSink("escape", filepath.Join(f.data, "..", "elsewhere.jsonl")))
	require.Equal(t, http.StatusBadRequest, code)
	escape := decode[ProblemsReply](t, body)
	require.Len(t, escape.Problems, 1)
	require.Equal(t, ProblemReply{File: "upload.yaml", Line: 12, Col: 5, Message: fmt.Sprintf(`sink "out": path %q is outside the data dir %s: an uploaded pipeline reads and writes files only there`,
		filepath.Join(f.data, "..", "elsewhere.jsonl"), f.data)}, escape.Problems[0])
	_, err = os.Stat(filepath.Join(f.dir, "escape.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused file is not written")

	code, body = a.do(http.MethodPost, "/api/pipelines", upload+strings.Repeat("#", DefaultMaxUpload))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)

	// One pipeline, and its own endpoint.
	code, body = a.do(http.MethodGet, "/api/pipelines/steady", "")
	require.Equal(t, http.StatusOK, code)
	detail := decode[PipelineDetail](t, body)
	require.Equal(t, "running", detail.State)
	require.NotNil(t, detail.Readiness)
	require.True(t, detail.Readiness.Ready)
	require.NotNil(t, detail.Status)
	require.Equal(t, "steady", detail.Status.Pipeline)
	require.Len(t, detail.Status.Nodes, 3)
	code, _ = a.do(http.MethodGet, "/api/pipelines/nope", "")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = a.do(http.MethodGet, "/pipelines/nope/healthz", "")
	require.Equal(t, http.StatusNotFound, code)
	code, body = a.do(http.MethodGet, "/pipelines/steady/healthz", "")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"running"}`, body)
	code, body = a.do(http.MethodGet, "/pipelines/steady/", "")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "eddy admin endpoint of pipeline steady\n"), body)
	require.NotContains(t, body, "/debug/pprof/", "the profiles are the process's")
	f.waitCheckpoint("steady")
	code, body = a.do(http.MethodPost, "/pipelines/steady/savepoints", "")
	require.Equal(t, http.StatusOK, code, body)
	sp := decode[SavepointReply](t, body)
	require.Equal(t, filepath.Join(f.stateDir, "steady", SavepointsDir), filepath.Dir(sp.Path))

	// The metrics of every pipeline, each labelled; the process's once.
	f.waitCheckpoint("uploaded") // its tasks opened: their series exist
	code, body = a.do(http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	for _, name := range []string{"steady", "uploaded", "failing"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^eddy_records_out_total\{id="numbers",pipeline="`+name+`",subtask="0"\} \d+$`), body)
	}
	require.Equal(t, 1, len(regexp.MustCompile(`(?m)^go_goroutines `).FindAllString(body, -1)), "go_goroutines once")
	require.Regexp(t, regexp.MustCompile(`(?m)^eddy_checkpoints_total\{kind="savepoint",pipeline="steady",result="completed"\} 1$`), body)

	// Not ready while a pipeline meant to run has failed.
	code, body = a.do(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	ready := decode[ServeReadiness](t, body)
	require.Equal(t, "1 of 3 pipelines are not ready: failing (the run ended: failed)", ready.Reason)

	// Stop with a savepoint: it stays stopped, also through a scan.
	code, body = a.do(http.MethodPost, "/api/pipelines/steady/stop?savepoint=true", "")
	require.Equal(t, http.StatusOK, code, body)
	detail = decode[PipelineDetail](t, body)
	require.Equal(t, "stopped", detail.State)
	require.True(t, detail.StoppedOnRequest)
	require.NotEmpty(t, detail.Savepoint)
	stoppedAt := detail.Savepoint
	f.rescan()
	require.Equal(t, "stopped", f.state("steady"))

	// Restart: from the savepoint of the stop.
	code, body = a.do(http.MethodPost, "/api/pipelines/steady/restart", "")
	require.Equal(t, http.StatusOK, code, body)
	detail = decode[PipelineDetail](t, body)
	require.Equal(t, stoppedAt, detail.Savepoint)
	require.False(t, detail.StoppedOnRequest)
	f.waitState("steady", "running")
	require.NotNil(t, f.run("steady").runner.Status().Checkpoints.Restored)

	// Delete: stopped with a savepoint, its file deleted, forgotten.
	f.waitCheckpoint("uploaded")
	code, body = a.do(http.MethodDelete, "/api/pipelines/uploaded", "")
	require.Equal(t, http.StatusOK, code, body)
	deleted := decode[map[string]string](t, body)
	require.Equal(t, "uploaded", deleted["deleted"])
	require.NotEmpty(t, deleted["savepoint"])
	_, err = os.Stat(filepath.Join(f.dir, "uploaded.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
	f.rescan()
	_, ok := f.row("uploaded")
	require.False(t, ok)

	code, _ = a.do(http.MethodDelete, "/api/pipelines/failing", "")
	require.Equal(t, http.StatusOK, code)
	code, body = a.do(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusOK, code, body)
	code, body = a.do(http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"status":"running","pipelines":{"steady":"running"}}`, body)
}

// TestUploadProblems: the paths an uploaded pipeline may name.
func TestUploadProblems(t *testing.T) {
	data, state, outside := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(data, "link")))
	require.NoError(t, os.Mkdir(filepath.Join(data, "in"), 0o755))
	source := func(path string) string {
		return fmt.Sprintf("version: 1\nname: p\nsources:\n  - id: in\n    type: file\n    path: %s\nsinks:\n  - id: out\n    type: blackhole\n", path)
	}
	tests := []struct {
		name, text, dataDir string
		// want are substrings of the problems, one each; none: allowed.
		want []string
	}{
		{name: "a file in the data dir", text: source(filepath.Join(data, "in", "a.jsonl")), dataDir: data},
		{name: "a glob in the data dir", text: source(filepath.Join(data, "in", "*.jsonl")), dataDir: data},
		{name: "a file that does not exist yet", text: fileSink("p", filepath.Join(data, "new", "dir", "out.jsonl")), dataDir: data},
		{name: "the data dir itself", text: source(data), dataDir: data},
		{name: "outside", text: source("/etc/passwd"), dataDir: data, want: []string{`source "in": path "/etc/passwd" is outside the data dir`}},
		{name: "up and out", text: source(filepath.Join(data, "in", "..", "..", "x")), dataDir: data, want: []string{"is outside the data dir"}},
		{name: "relative, out of the working directory", text: source("../x.jsonl"), dataDir: data, want: []string{"is outside the data dir"}},
		{name: "a symbolic link out", text: source(filepath.Join(data, "link", "secret")), dataDir: data, want: []string{"is outside the data dir"}},
		{name: "no data dir", text: source(filepath.Join(data, "in", "a.jsonl")), want: []string{`eddy serve has no --data-dir, so an uploaded pipeline may name no file`}},
		{name: "no file at all", text: keyed("p", "totals", "")},
		{name: "state.dir in the state dir", text: keyed("p", "totals", "") + "state:\n  dir: " + filepath.Join(state, "sub") + "\n"},
		{name: "state.dir elsewhere", text: keyed("p", "totals", "") + "state:\n  dir: " + outside + "\n",
			want: []string{fmt.Sprintf(`state.dir %q is outside the state dir %s`, outside, state)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := pipeline.Load(pipeline.Default, "p.yaml", []byte(tt.text))
			require.NoError(t, err)
			ps := uploadProblems(spec, tt.dataDir, state)
			require.Len(t, ps, len(tt.want), "%v", ps)
			for i, w := range tt.want {
				require.Contains(t, ps[i].Msg, w)
			}
		})
	}
}
