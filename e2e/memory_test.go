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
// pipeline as asked, its arguments intact; a GODEBUG that sets
// madvdontneed already is left alone. The runtime's choice shows in the
// debug log, which the re-executed process writes from its own GODEBUG.
func TestRunReleasesMemoryLazily(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`version: 1
name: lazy
sources:
  - id: gen
    type: generator
    count: 3
    fields:
      i: i
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
			r := eddy(t, dir, env, "run", "--log-level", "debug", "--log-format", "json", file)
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, 3, strings.Count(r.stdout, "\n"), "the pipeline ran once, to its end:\n%s", r.stdout)
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
