package all

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// runFilePipeline runs a pipeline reading in.jsonl of dir through a file
// source with the given on_error and sink entries, and returns its error.
func runFilePipeline(t *testing.T, dir, onError, sinks string) error {
	t.Helper()
	yaml := fmt.Sprintf(`version: 1
name: decode-errors
parallelism: 1
sources:
  - id: readings
    type: file
    path: %s
    on_error: %s
sinks:
%s`, strconv.Quote(filepath.Join(dir, "in.jsonl")), onError, sinks)
	spec, err := pipeline.Load(pipeline.Default, "decode-errors.yaml", []byte(yaml))
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return r.Run(ctx)
}

func writeInput(t *testing.T) (dir, in string) {
	t.Helper()
	dir = t.TempDir()
	in = filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte("{\"id\":1,\"t\":20.5}\n{\"id\":\n{\"id\":3}\n"), 0o644))
	return dir, in
}

// A line that does not decode goes to the source's dead-letter stream; the
// good lines around it reach the main sink.
func TestRunDecodeErrorDeadLetter(t *testing.T) {
	dir, in := writeInput(t)
	out, bad := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "bad.jsonl")
	err := runFilePipeline(t, dir, "dead_letter", fmt.Sprintf(`  - id: out
    from: readings
    type: file
    path: %s
  - id: bad
    from: readings.errors
    type: file
    path: %s
`, strconv.Quote(out), strconv.Quote(bad)))
	require.NoError(t, err)

	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "{\"id\":1,\"t\":20.5}\n{\"id\":3}\n", string(got))
	got, err = os.ReadFile(bad)
	require.NoError(t, err)
	require.Equal(t, `{"error":"`+in+`:2: invalid JSON: unexpected end of JSON input","record":{"raw":"{\"id\":"},"step":"readings"}`+"\n", string(got))
}

// Under on_error: fail the run fails with FILE:LINE.
func TestRunDecodeErrorFail(t *testing.T) {
	dir, in := writeInput(t)
	err := runFilePipeline(t, dir, "fail", fmt.Sprintf(`  - id: out
    from: readings
    type: file
    path: %s
`, strconv.Quote(filepath.Join(dir, "out.jsonl"))))
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.ErrorContains(t, err, in+":2: invalid JSON: unexpected end of JSON input")
}
