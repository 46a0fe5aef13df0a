package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRestartStrategy runs a checkpointed pipeline whose record 500 always
// fails (on_error: fail): with fixed_delay and 2 attempts the process
// restarts the job twice from its latest checkpoint, then gives up with
// exit 1, and every restart resumes after what was already committed.
func TestRestartStrategy(t *testing.T) {
	work := t.TempDir()
	file := filepath.Join(work, "restart.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
version: 1
name: restarts
checkpoint: { interval: 20ms }
restart: { strategy: fixed_delay, attempts: 2, delay: 10ms }
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
`), 0o644))
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
