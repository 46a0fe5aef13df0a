package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeAheadText is a generator into a stdout sink with write_ahead; the
// %s is the pipeline name and the %d the record whose step fails every
// attempt (-1: none).
const writeAheadText = `
version: 1
name: %s
checkpoint: { interval: 20ms }
restart: { strategy: fixed_delay, attempts: 2, delay: 10ms }
sources:
  - id: nums
    type: generator
    count: 1000
    rate: 5000
    fields:
      i: i
      v: 'i == %d ? "x" : i'
steps:
  - id: plus_one
    set: { w: v + 1 }
    on_error: fail
sinks:
  - id: out
    type: stdout
    write_ahead: true
`

// TestWriteAheadStdout runs a stdout sink with write_ahead: a run that
// ends prints every record once, in order, and leaves the sink's commit
// marker; a run whose record 500 fails every attempt restarts twice from
// its latest checkpoint and prints only committed records, each once
// (a plain stdout sink prints the records a restart replays again).
func TestWriteAheadStdout(t *testing.T) {
	work := t.TempDir()
	env := map[string]string{"EDDY_STATE_DIR": filepath.Join(work, "state")}
	file := filepath.Join(work, "ok.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, writeAheadText, "wa-ok", -1), 0o644))

	var p struct {
		Guarantee struct {
			Reasons []string `json:"reasons"`
		} `json:"guarantee"`
	}
	r := eddy(t, work, env, "explain", "--format", "json", file)
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &p))
	require.Contains(t, strings.Join(p.Guarantee.Reasons, "\n"), `sink "out" (stdout) is at-least-once with write_ahead`)

	r = eddy(t, work, env, "run", file)
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 1000)
	for i, l := range lines {
		require.Equal(t, fmt.Sprintf(`{"i":%d,"v":%d,"w":%d}`, i, i, i+1), l)
	}
	_, err := os.Stat(filepath.Join(work, "state", "wa-ok", "write-ahead", "out", "0.committed"))
	require.NoError(t, err, "the sink's commit marker")

	file = filepath.Join(work, "fail.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, writeAheadText, "wa-fail", 500), 0o644))
	r = eddy(t, work, env, "run", file)
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stderr, "restarting from the latest checkpoint"), r.stderr)
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if l == "" {
			continue
		}
		require.False(t, seen[l], "record printed twice: %s", l)
		seen[l] = true
		require.NotContains(t, l, `"i":500,`)
	}
}
