//go:build !windows

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGracefulStop starts an unbounded pipeline, waits until its sinks have
// written something, sends SIGTERM (as systemd and docker stop do) or SIGINT
// (Ctrl-C), and expects a graceful stop: exit 0, and the output holds
// exactly the records i = 0..N-1 the source read, N being the records_read
// of the summary: nothing read was lost, nothing was written twice.
func TestGracefulStop(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			env := map[string]string{"EDDY_OUT": out, "EDDY_LOG_FORMAT": "json", "EDDY_STATE_DIR": t.TempDir()}
			c := eddyCommand(ctx, ".", env, "run", "testdata/unbounded.yaml")
			var stdout, stderr bytes.Buffer
			c.Stdout, c.Stderr = &stdout, &stderr
			require.NoError(t, c.Start())

			// Poll for output: lines in the files are the signal that the
			// pipeline runs end to end, not a sleep.
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for len(outputLines(t, out)) == 0 {
				select {
				case <-tick.C:
				case <-ctx.Done():
					_ = c.Process.Kill()
					_ = c.Wait()
					t.Fatalf("no output before the timeout; stderr:\n%s", stderr.String())
				}
			}
			require.NoError(t, c.Process.Signal(sig))
			err := c.Wait()
			require.NoError(t, ctx.Err(), "eddy did not stop; stderr:\n%s", stderr.String())
			require.Equal(t, 0, exitCode(t, err), stderr.String())
			require.Empty(t, stdout.String())

			s := summary(t, stderr.String())
			require.Equal(t, "stopped", s.status)
			n := s.sources["numbers"]
			require.Positive(t, n)
			require.Equal(t, n, s.read)
			require.Equal(t, n, s.written)

			var is []int64
			for _, line := range outputLines(t, out) {
				var rec struct {
					I      *int64 `json:"i"`
					Bucket int64  `json:"bucket"`
					Pad    string `json:"pad"`
				}
				require.NoError(t, json.Unmarshal(line, &rec), "%s", line)
				require.NotNil(t, rec.I, "%s", line)
				require.Equal(t, *rec.I%8, rec.Bucket)
				require.Len(t, rec.Pad, 100)
				is = append(is, *rec.I)
			}
			slices.Sort(is)
			require.Len(t, is, int(n), "lines written vs records read")
			for k, i := range is {
				if i != int64(k) {
					require.Failf(t, "gap or duplicate", "sorted output has i=%d at position %d (of %d)", i, k, n)
				}
			}
		})
	}
}

// outputLines returns the complete lines (ending in a newline) of every
// .jsonl file in dir; a line being written is left out.
func outputLines(t *testing.T, dir string) [][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	var lines [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		b = b[:bytes.LastIndexByte(b, '\n')+1]
		for line := range bytes.Lines(b) {
			lines = append(lines, bytes.TrimSuffix(line, []byte("\n")))
		}
	}
	return lines
}
