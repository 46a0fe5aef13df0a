//go:build !windows

package e2e_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// servePipeline is an unbounded pipeline NAME that checkpoints every 50ms
// and writes part files into ${SERVE_OUT}/NAME/.
const servePipeline = `version: 1
name: NAME
checkpoint:
  interval: 50ms
sources:
  - id: numbers
    type: generator
    rate: 200
    fields:
      i: i
sinks:
  - id: out
    type: file
    path: ${SERVE_OUT}/NAME/
`

func servePipelineText(name string) string { return strings.ReplaceAll(servePipeline, "NAME", name) }

// serveFailing fails on its first record and does not restart.
const serveFailing = `version: 1
name: failing
restart:
  strategy: none
sources:
  - id: numbers
    type: generator
    count: 10
    fields:
      i: i
steps:
  - id: boom
    set:
      x: 10 % (i - i)
sinks:
  - id: out
    type: blackhole
`

// serveClient talks to the admin endpoint of a running eddy serve.
type serveClient struct {
	t     *testing.T
	base  string
	token string
}

func (c serveClient) do(method, path, body, token string) (int, string) {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	require.NoError(c.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, string(b)
}

// states returns each pipeline's state, from GET /api/pipelines.
func (c serveClient) states() map[string]string {
	c.t.Helper()
	code, body := c.do(http.MethodGet, "/api/pipelines", "", "")
	require.Equal(c.t, http.StatusOK, code, body)
	var list struct {
		Pipelines []struct{ Name, State string }
	}
	require.NoError(c.t, json.Unmarshal([]byte(body), &list), body)
	out := map[string]string{}
	for _, p := range list.Pipelines {
		out[p.Name] = p.State
	}
	return out
}

// waitStates polls GET /api/pipelines (no event tells of a pipeline's
// state from outside the process) until the states are want, or the
// process ends.
func (c serveClient) waitStates(p *proc, want map[string]string) {
	c.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got := c.states()
		if len(got) == len(want) {
			same := true
			for k, v := range want {
				same = same && got[k] == v
			}
			if same {
				return
			}
		}
		select {
		case <-tick.C:
		case <-p.done:
			c.t.Fatalf("eddy serve ended while waiting for %v (last %v); stderr:\n%s", want, got, p.log.text())
		}
	}
}

// TestServe runs the binary's `eddy serve` on a folder: it refuses every
// interface without a token; with one, it runs the folder's pipelines (one
// failing), takes an upload through the REST interface (only with the
// token), picks up a file added and removed by hand, lets `eddy savepoint
// trigger` find a pipeline, and stops every pipeline with a savepoint on
// SIGTERM.
func TestServe(t *testing.T) {
	const token = "e2e-serve-token"
	work := t.TempDir()
	dir, state, out := filepath.Join(work, "pipelines"), filepath.Join(work, "state"), filepath.Join(work, "out")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Mkdir(out, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "steady.yaml"), []byte(servePipelineText("steady")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "failing.yaml"), []byte(serveFailing), 0o644))
	env := map[string]string{"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state, "SERVE_OUT": out}

	r := eddy(t, work, env, "serve", "--dir", dir, "--admin-addr", "0.0.0.0:0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "set EDDY_ADMIN_TOKEN to a secret")

	env["EDDY_ADMIN_TOKEN"] = token
	p := startEddy(t, work, env, "serve", "--dir", dir, "--data-dir", out, "--admin-addr", "127.0.0.1:0", "--poll", "100ms")
	addr := waitListening(t, p)
	c := serveClient{t: t, base: "http://" + addr, token: token}
	c.waitStates(p, map[string]string{"steady": "running", "failing": "failed"})

	health := eddy(t, work, nil, "health", "--admin-addr", addr)
	require.Equal(t, 0, health.code, health.stderr)
	require.Equal(t, "running\n", health.stdout)

	// An upload needs the token.
	code, body := c.do(http.MethodPost, "/api/pipelines", servePipelineText("uploaded"), "")
	require.Equal(t, http.StatusUnauthorized, code, body)
	code, body = c.do(http.MethodPost, "/api/pipelines", servePipelineText("uploaded"), token)
	require.Equal(t, http.StatusCreated, code, body)
	c.waitStates(p, map[string]string{"steady": "running", "failing": "failed", "uploaded": "running"})

	// A file added by hand, then removed.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "byhand.yml"), []byte(servePipelineText("byhand")), 0o644))
	c.waitStates(p, map[string]string{"steady": "running", "failing": "failed", "uploaded": "running", "byhand": "running"})
	require.NoError(t, os.Remove(filepath.Join(dir, "byhand.yml")))
	c.waitStates(p, map[string]string{"steady": "running", "failing": "failed", "uploaded": "running"})
	require.Len(t, savepointFiles(t, filepath.Join(state, "byhand", "savepoints")), 1, "a removed pipeline stops with a savepoint")

	// eddy savepoint trigger finds a pipeline of eddy serve.
	sp := eddy(t, work, env, "savepoint", "trigger", "--pipeline", "steady", "--state-dir", state)
	require.Equal(t, 0, sp.code, sp.stderr)
	require.Equal(t, filepath.Join(state, "steady", "savepoints"), filepath.Dir(strings.TrimSpace(sp.stdout)))

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t).code, p.log.text())
	require.NotEmpty(t, p.log.find("every pipeline stopped"))
	for _, name := range []string{"steady", "uploaded"} {
		files := savepointFiles(t, filepath.Join(state, name, "savepoints"))
		require.NotEmpty(t, files, "%s stopped with a savepoint", name)
		_, err := os.Stat(filepath.Join(state, name, "admin.addr"))
		require.ErrorIs(t, err, os.ErrNotExist, "%s's admin.addr is removed", name)
	}
}

// waitListening waits for the log line of the admin endpoint and returns
// its address.
func waitListening(t *testing.T, p *proc) string {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if l := p.log.find("admin endpoint listening"); len(l) > 0 {
			return l[0].Addr
		}
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy ended before its admin endpoint listened; stderr:\n%s", p.log.text())
		}
	}
}

// savepointFiles returns the savepoint files of dir.
func savepointFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "savepoint-*.db"))
	require.NoError(t, err)
	return files
}
