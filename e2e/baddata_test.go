package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Unix filter (stdin -> stdout, on_error: fail) prints every record it
// read before the bad line, in order, and the summary counts them.
func TestBadLineFilterEmitsWhatCameBefore(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "filter.yaml"), `version: 1
name: filter
sources:
  - id: in
    type: stdin
    on_error: fail
sinks:
  - id: out
    from: in
    type: stdout
`)
	var in strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&in, "{\"n\":%d}\n", i)
	}
	in.WriteString("not json\n{\"n\":1001}\n")
	r := eddyWithInput(t, dir, map[string]string{"EDDY_LOG_FORMAT": "json"}, in.String(), "run", "filter.yaml")
	require.Equal(t, 1, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 1000, "every line before the bad one")
	for i, l := range lines {
		require.Equal(t, fmt.Sprintf("{\"n\":%d}", i+1), l, "line %d", i+1)
	}
	require.Contains(t, r.stderr, `stdin:1001: invalid JSON: a line must be a JSON object, not \"not json\"`)
	s := summary(t, r.stderr)
	require.Equal(t, "failed", s.status)
	require.Equal(t, int64(1000), s.read)
	require.Equal(t, map[string]int64{"out": 1000}, s.sinks)
}

// A sink that cannot write out (a full disk: /dev/full) counts nothing as
// written, however many records it was handed.
func TestFullDiskCountsNothingWritten(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "full.yaml"), `version: 1
name: full
sources:
  - id: gen
    type: generator
    count: 100000
    fields:
      n: i
sinks:
  - id: ok
    from: gen
    type: blackhole
  - id: disk
    from: gen
    type: file
    path: /dev/full
`)
	r := eddy(t, dir, map[string]string{"EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": t.TempDir()}, "run", "full.yaml")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "no space left on device")
	s := summary(t, r.stderr)
	require.Equal(t, "failed", s.status)
	require.Zero(t, s.sinks["disk"], "nothing reached /dev/full")
	require.LessOrEqual(t, s.sinks["ok"], s.read)
	require.Equal(t, s.sinks["ok"], s.written, "the total is the blackhole's")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}
