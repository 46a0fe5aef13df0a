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

// openStdin opens the source of cfg with r as the job's standard input.
func openStdin(t *testing.T, cfg *StdinConfig, r io.Reader) pipeline.Source {
	t.Helper()
	src, err := cfg.NewSource()
	require.NoError(t, err)
	require.NoError(t, src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("in", 0, 1), Stdin: r}))
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src
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
			batches := conntest.Drain(t, openStdin(t, loadStdin(t, tt.keys), strings.NewReader(tt.input)), 5*time.Second)
			require.Equal(t, tt.want, conntest.Fields(batches))
			require.Nil(t, conntest.LastPosition(batches), "stdin has no position")
		})
	}
}

func TestStdinInvalidLines(t *testing.T) {
	batches := conntest.Drain(t, openStdin(t, loadStdin(t, ""), strings.NewReader("{\"a\":1}\nnope\n{\"a\":2}\n")), 5*time.Second)
	require.Equal(t, []map[string]any{{"a": int64(1)}, {"a": int64(2)}}, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{{Fields: map[string]any{"raw": "nope"},
		Err: `stdin:2: invalid JSON: a line must be a JSON object, not "nope"`}}, conntest.Failures(batches))

	batches = conntest.Drain(t, openStdin(t, loadStdin(t, "format: csv\ncsv_delimiter: ';'"), strings.NewReader("a;b\n1;2;3\n")), 5*time.Second)
	require.Empty(t, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{{Fields: map[string]any{"raw": "1;2;3"},
		Err: "stdin:2: invalid CSV: the record has 3 fields, the header has 2"}}, conntest.Failures(batches))

	_, err := conntest.LoadSource(t, "stdin", "on_decode_error: skip")
	require.ErrorContains(t, err, `unknown key "on_decode_error"`)
}

func TestStdinReadHonoursContext(t *testing.T) {
	r, w := io.Pipe()
	t.Cleanup(func() { _ = w.Close() })
	src := openStdin(t, loadStdin(t, "format: text"), r)

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

// openStdout opens the sink of cfg with w as the job's standard output.
func openStdout(t *testing.T, cfg pipeline.SinkConfig, w io.Writer) pipeline.Sink {
	t.Helper()
	sink, err := cfg.NewSink()
	require.NoError(t, err)
	require.NoError(t, sink.Open(context.Background(), &pipeline.SinkContext{SubtaskInfo: conntest.Info("out", 0, 1), Stdout: w}))
	return sink
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
			var out bytes.Buffer
			cfg, err := conntest.LoadSink(t, "stdout", tt.keys)
			require.NoError(t, err)
			ctx := context.Background()
			s := openStdout(t, cfg, &out)
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
	cfg, err := conntest.LoadSink(t, "stdout", "")
	require.NoError(t, err)
	require.Equal(t, 1, cfg.(*StdoutConfig).MaxParallelism())
	require.Equal(t, pipeline.AtLeastOnce, cfg.(*StdoutConfig).Guarantee())
	s := openStdout(t, cfg, io.Discard)
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
