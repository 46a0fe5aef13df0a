package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// restartText is a checkpointed generator into a file sink whose record
// 500 always fails (on_error: fail); the %s is the pipeline name, the %d
// and the second %s the fixed_delay strategy's attempts and delay.
const restartText = `
version: 1
name: %s
checkpoint: { interval: 20ms }
restart: { strategy: fixed_delay, attempts: %d, delay: %s }
sources:
  - id: nums
    type: generator
    count: 1000
    rate: 5000
    fields:
      i: i
      v: 'i == 500 ? "x" : i'
steps:
  - id: plus_one
    set: { w: v + 1 }
    on_error: fail
sinks:
  - id: out
    type: file
    path: out/
`

// TestRestartStrategy runs a checkpointed pipeline whose record 500 always
// fails (on_error: fail): with fixed_delay and 2 attempts the process
// restarts the job twice from its latest checkpoint, then gives up with
// exit 1, and every restart resumes after what was already committed.
func TestRestartStrategy(t *testing.T) {
	work := t.TempDir()
	file := filepath.Join(work, "restart.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, restartText, "restarts", 2, "10ms"), 0o644))
	env := map[string]string{"EDDY_STATE_DIR": filepath.Join(work, "state")}
	r := eddy(t, work, env, "run", file)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stderr, "restarting from the latest checkpoint"), r.stderr)
	require.Contains(t, r.stderr, "the 2 restart attempts are used up")
	// Restarts resume from the checkpoint, so no committed record repeats.
	lines := committedLines(t, filepath.Join(work, "out"))
	seen := map[string]bool{}
	for _, l := range lines {
		require.False(t, seen[l], "record written twice: %s", l)
		seen[l] = true
	}
	require.NotContains(t, strings.Join(lines, "\n"), `"i":500,`)
}

// TestRestartMetrics: while a job that failed waits to restart, its admin
// endpoint reports the restart and the checkpoints that completed before,
// one per log line, and the process's own metrics.
func TestRestartMetrics(t *testing.T) {
	work := t.TempDir()
	file := filepath.Join(work, "restart.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, restartText, "restart-metrics", 1, "10m"), 0o644))
	state := filepath.Join(work, "state")
	p := startEddy(t, work, map[string]string{"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": state, "GOMEMLIMIT": "3GiB"}, "run", file)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(p.log.find("pipeline failed: restarting from the latest checkpoint")) == 0 {
		select {
		case <-tick.C:
		case <-p.done:
			t.Fatalf("eddy run ended before it restarted; stderr:\n%s", p.log.text())
		}
	}
	addr, err := os.ReadFile(filepath.Join(state, "restart-metrics", "admin.addr"))
	require.NoError(t, err)
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	metrics := string(body)
	require.Contains(t, metrics, "\neddy_restarts_total 1\n")
	lines := p.log.find("checkpoint complete")
	completed := len(lines)
	require.Contains(t, metrics, fmt.Sprintf("\neddy_checkpoints_total{kind=\"checkpoint\",result=\"completed\"} %d\n", completed))
	require.Contains(t, metrics, "\neddy_checkpoints_total{kind=\"checkpoint\",result=\"failed\"} 0\n")
	require.Contains(t, metrics, "\neddy_checkpoints_in_progress 0\n")
	// The Go runtime's and the process's series (the memory alert's).
	require.Contains(t, metrics, "\ngo_gc_gomemlimit_bytes 3.221225472e+09\n")
	rss := regexp.MustCompile(`\nprocess_resident_memory_bytes ([0-9.e+]+)\n`).FindStringSubmatch(metrics)
	require.NotNil(t, rss, "process_resident_memory_bytes")
	rssBytes, err := strconv.ParseFloat(rss[1], 64)
	require.NoError(t, err)
	require.Greater(t, rssBytes, float64(1<<20))
	require.Regexp(t, `\ngo_memstats_heap_released_bytes [0-9]`, metrics)

	// GET /checkpoints: what was in flight when the job failed is aborted,
	// the rest completed; the newest completed is the last logged.
	resp, err = http.Get("http://" + strings.TrimSpace(string(addr)) + "/checkpoints")
	require.NoError(t, err)
	var stats struct {
		InProgress []json.RawMessage `json:"in_progress"`
		History    []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		} `json:"history"`
		LatestCompleted *struct {
			ID int64 `json:"id"`
		} `json:"latest_completed"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&stats))
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Empty(t, stats.InProgress)
	aborted := 0
	for _, r := range stats.History {
		switch r.Status {
		case "completed":
		case "aborted":
			aborted++
			require.NotEmpty(t, r.Error)
		default:
			t.Fatalf("checkpoint %d: status %q", r.ID, r.Status)
		}
	}
	require.LessOrEqual(t, aborted, 1, "max_concurrent is 1")
	require.Len(t, stats.History, min(completed+aborted, 10), "the last ten that ended")
	if completed > 0 {
		require.Equal(t, *lines[completed-1].Checkpoint, stats.LatestCompleted.ID)
	}
}
