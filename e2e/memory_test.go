//go:build linux

package e2e_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunReleasesMemoryLazily: `eddy run` re-executes itself with GODEBUG
// madvdontneed=0 (freed heap goes back with MADV_FREE), and runs the
// pipeline as asked, its arguments and standard input intact; a GODEBUG
// that sets madvdontneed already is left alone. The runtime's choice shows
// in the debug log, which the re-executed process writes from its own
// GODEBUG.
func TestRunReleasesMemoryLazily(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`version: 1
name: lazy
sources:
  - id: in
    type: stdin
    format: text
sinks:
  - id: out
    type: stdout
`), 0o644))
	for _, tc := range []struct{ godebug, want string }{
		{"", "MADV_FREE"},
		{"panicnil=0", "MADV_FREE"},
		{"madvdontneed=1", "MADV_DONTNEED"},
		{"madvdontneed=0", "MADV_FREE"},
	} {
		t.Run("GODEBUG="+tc.godebug, func(t *testing.T) {
			env := map[string]string{"GODEBUG": tc.godebug, "EDDY_STATE_DIR": t.TempDir()}
			r := eddyWithInput(t, dir, env, "first\nsecond\nthird\n", "run", "--log-level", "debug", "--log-format", "json", file)
			require.Equal(t, 0, r.code, r.stderr)
			var lines []string
			for line := range strings.Lines(r.stdout) {
				var rec struct{ Line string }
				require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
				lines = append(lines, rec.Line)
			}
			require.Equal(t, []string{"first", "second", "third"}, lines, "standard input read once, whole")
			var advice []string
			for line := range strings.Lines(r.stderr) {
				var e struct {
					Msg     string `json:"msg"`
					Madvise string `json:"madvise"`
				}
				if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "freed memory goes back to the kernel" {
					advice = append(advice, e.Madvise)
				}
			}
			require.Equal(t, []string{tc.want}, advice, r.stderr)
		})
	}
}
