package stdio

import (
	"bytes"
	"context"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// withStdin makes r the standard input for the test.
func withStdin(t *testing.T, r io.Reader) {
	old := Stdin
	Stdin = r
	t.Cleanup(func() { Stdin = old })
}

func loadStdin(t *testing.T, body string) *StdinConfig {
	t.Helper()
	cfg, err := conntest.LoadSource(t, "stdin", body)
	require.NoError(t, err)
	return cfg.(*StdinConfig)
}

func TestStdinFormats(t *testing.T) {
	tests := []struct {
		name  string
		keys  string
		input string
		want  []map[string]any
	}{
		{"json", "", "{\"a\":1}\n\n{\"b\":\"x\"}", []map[string]any{{"a": int64(1)}, {"b": "x"}}},
		{"csv", "format: csv", "a,b\n1,\"x\ny\"\n", []map[string]any{{"a": "1", "b": "x\ny"}}},
		{"text", "format: text", "one\n\ntwo\n", []map[string]any{{"line": "one"}, {"line": ""}, {"line": "two"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			withStdin(t, strings.NewReader(tt.input))
			batches := conntest.Drain(t, conntest.OpenSource(t, loadStdin(t, tt.keys), 0, 1, nil), 5*time.Second)
			require.Equal(t, tt.want, conntest.Fields(batches))
			require.Nil(t, conntest.LastPosition(batches), "stdin has no position")
		})
	}
}

func TestStdinInvalidLines(t *testing.T) {
	withStdin(t, strings.NewReader("{\"a\":1}\nnope\n{\"a\":2}\n"))
	batches := conntest.Drain(t, conntest.OpenSource(t, loadStdin(t, ""), 0, 1, nil), 5*time.Second)
	require.Equal(t, []map[string]any{{"a": int64(1)}, {"a": int64(2)}}, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{{Fields: map[string]any{"raw": "nope"},
		Err: `stdin:2: invalid JSON: a line must be a JSON object, not "nope"`}}, conntest.Failures(batches))

	withStdin(t, strings.NewReader("a;b\n1;2;3\n"))
	batches = conntest.Drain(t, conntest.OpenSource(t, loadStdin(t, "format: csv\ncsv_delimiter: ';'"), 0, 1, nil), 5*time.Second)
	require.Empty(t, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{{Fields: map[string]any{"raw": "1;2;3"},
		Err: "stdin:2: invalid CSV: the record has 3 fields, the header has 2"}}, conntest.Failures(batches))

	_, err := conntest.LoadSource(t, "stdin", "on_decode_error: skip")
	require.ErrorContains(t, err, `unknown key "on_decode_error"`)
}

func TestStdinReadHonoursContext(t *testing.T) {
	r, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	withStdin(t, r)
	src := conntest.OpenSource(t, loadStdin(t, "format: text"), 0, 1, nil)

	start := time.Now()
	b := conntest.ReadOnce(t, src, 30*time.Millisecond)
	require.ErrorIs(t, b.Err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second)

	// A line written later is delivered as soon as it is complete.
	go func() { _, _ = w.Write([]byte("hello\n")) }()
	b = conntest.ReadOnce(t, src, 5*time.Second)
	require.NoError(t, b.Err)
	require.Equal(t, []map[string]any{{"line": "hello"}}, conntest.Fields([]conntest.Batch{b}))
	require.NoError(t, w.Close())
	require.ErrorIs(t, conntest.ReadOnce(t, src, 5*time.Second).Err, io.EOF)
}

func TestStdinLoad(t *testing.T) {
	cfg := loadStdin(t, "format: csv\ncsv_delimiter: ';'")
	require.Equal(t, 1, cfg.MaxParallelism())
	require.True(t, cfg.Bounded())
	require.Equal(t, pipeline.AtMostOnce, cfg.Guarantee())

	_, err := conntest.LoadSource(t, "stdin", "parallelism: 2")
	require.ErrorContains(t, err, `source "in": a stdin source runs with parallelism at most 1`)
	_, err = conntest.LoadSource(t, "stdin", "format: yaml")
	require.ErrorContains(t, err, `format: must be json, csv or text, not "yaml"`)
	_, err = conntest.LoadSource(t, "stdin", "path: x")
	require.ErrorContains(t, err, `unknown key "path"`)
}

// withStdout captures standard output for the test.
func withStdout(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	old := Stdout
	Stdout = &buf
	t.Cleanup(func() { Stdout = old })
	return &buf
}

func TestStdout(t *testing.T) {
	tests := []struct {
		name string
		keys string
		want string
	}{
		{"json", "", "{\"a\":1,\"b\":{\"c\":\"<x>\",\"d\":[1.5,null]}}\n{\"z\":1e+21}\n"},
		{"csv", "format: csv\ncolumns: [a, z]", "a,z\n1,\n,1e+21\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := withStdout(t)
			cfg, err := conntest.LoadSink(t, "stdout", tt.keys)
			require.NoError(t, err)
			ctx := context.Background()
			s := conntest.OpenSink(t, cfg, 0, 1)
			require.NoError(t, s.Write(ctx, conntest.Records(
				map[string]any{"b": map[string]any{"d": []any{1.5, nil}, "c": "<x>"}, "a": 1},
				map[string]any{"z": 1e21},
			)))
			require.Empty(t, out.String(), "buffered until Flush")
			require.NoError(t, s.Flush(ctx))
			require.Equal(t, tt.want, out.String())
			require.NoError(t, s.Close(ctx))
		})
	}
}

func TestStdoutErrorsAndLoad(t *testing.T) {
	withStdout(t)
	cfg, err := conntest.LoadSink(t, "stdout", "")
	require.NoError(t, err)
	require.Equal(t, 1, cfg.(*StdoutConfig).MaxParallelism())
	require.Equal(t, pipeline.AtLeastOnce, cfg.(*StdoutConfig).Guarantee())
	s := conntest.OpenSink(t, cfg, 0, 1)
	err = s.Write(context.Background(), conntest.Records(map[string]any{"x": math.Inf(1)}))
	require.EqualError(t, err, `stdout sink "out": field "x": json: unsupported value: +Inf`)
	var re *pipeline.SinkRecordError
	require.ErrorAs(t, err, &re)
	require.Zero(t, re.Index)

	_, err = conntest.LoadSink(t, "stdout", "parallelism: 3")
	require.ErrorContains(t, err, "a stdout sink runs with parallelism at most 1")
	_, err = conntest.LoadSink(t, "stdout", "format: csv")
	require.ErrorContains(t, err, "columns: format csv needs the list of columns")
}
