//go:build unix

package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// gatedText is a pipeline NAME whose file sink writes into the named pipe
// FIFO: opening it blocks until a reader opens the pipe, so its job does
// not open every task (it stays starting) until the test says.
const gatedText = `version: 1
name: NAME
sources:
  - id: numbers
    type: generator
    rate: 100
    fields:
      i: i
sinks:
  - id: out
    type: file
    path: FIFO
`

// gate is a named pipe that holds back the job of a gated pipeline until
// open.
type gate struct {
	path string
	once sync.Once
}

// newGate makes the pipe in dir. Call g.open in a cleanup registered
// after the one that stops the pipeline (cleanups run last first): a
// sink blocked in its open does not stop.
func newGate(t *testing.T, dir string) *gate {
	t.Helper()
	g := &gate{path: filepath.Join(dir, "gate.fifo")}
	require.NoError(t, syscall.Mkfifo(g.path, 0o600))
	return g
}

// pipeline returns the text of gated pipeline name that writes into g.
func (g *gate) pipeline(name string) string {
	return strings.NewReplacer("NAME", name, "FIFO", g.path).Replace(gatedText)
}

// open opens the pipe for reading (which lets the sink's open return)
// and reads it to its end, on a goroutine of its own.
func (g *gate) open() {
	g.once.Do(func() {
		go func() {
			f, err := os.OpenFile(g.path, os.O_RDONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(io.Discard, f)
		}()
	})
}

// TestServeStarted: the folder started once every pipeline started or
// failed: a pipeline that fails, or whose file is invalid, does not hold
// it back; one whose job has not opened every task does. WaitStarted
// returns then, and false when its context ends first. GET /healthz gives
// the same states.
func TestServeStarted(t *testing.T) {
	data := t.TempDir()
	g := newGate(t, data)
	f := newServe(t, map[string]string{
		"steady.yaml":  keyed("steady", "totals", ""),
		"failing.yaml": failingText,
		"broken.yaml":  brokenText,
		"gated.yaml":   g.pipeline("gated"),
	})
	t.Cleanup(g.open)
	f.waitState("steady", "running")
	f.waitState("failing", "failed")
	f.waitState("broken", "invalid")
	f.waitFor("gated's job started", func() bool {
		r := f.run("gated")
		return r != nil && r.runner.Status().Started != nil
	})
	s := f.m.Summary()
	require.True(t, s.Scanned)
	require.False(t, s.Closing)
	require.False(t, s.LastScan.IsZero())
	require.Equal(t, map[string]string{"steady": "running", "failing": "failed", "broken": "invalid", "gated": "starting"}, s.States)
	require.False(t, s.Started(), "gated's sink has not opened")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, f.m.WaitStarted(ctx), "the context ended first")

	waited := make(chan bool, 1)
	go func() { waited <- f.m.WaitStarted(context.Background()) }()
	g.open()
	require.True(t, <-waited)
	s = f.m.Summary()
	require.True(t, s.Started())
	require.Equal(t, map[string]string{"steady": "running", "failing": "failed", "broken": "invalid", "gated": "running"}, s.States)

	var health struct {
		Status    string
		Pipelines map[string]string
	}
	rec := httptest.NewRecorder()
	f.m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &health), rec.Body.String())
	require.Equal(t, "running", health.Status)
	require.Equal(t, s.States, health.Pipelines)

	f.shutdown()
	s = f.m.Summary()
	require.True(t, s.Closing)
	require.Equal(t, map[string]string{"steady": "stopped", "failing": "failed", "broken": "invalid", "gated": "stopped"}, s.States)
}

// TestSummaryStarted: which states hold the folder's start back.
func TestSummaryStarted(t *testing.T) {
	require.False(t, Summary{}.Started(), "no scan yet")
	require.True(t, Summary{Scanned: true}.Started(), "an empty folder")
	for state, started := range map[string]bool{
		"pending": false, "starting": false, "restoring": false,
		"running": true, "restarting": true, "stopping": true, "finished": true, "stopped": true,
		"cancelled": true, "failed": true, "aborted": true, "invalid": true,
	} {
		s := Summary{Scanned: true, States: map[string]string{"a": "running", "b": state}}
		require.Equal(t, started, s.Started(), state)
	}
}
