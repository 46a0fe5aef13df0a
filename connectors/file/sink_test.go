package file

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

func loadSink(t *testing.T, body string) *SinkConfig {
	t.Helper()
	cfg, err := conntest.LoadSink(t, "file", body)
	require.NoError(t, err)
	return cfg.(*SinkConfig)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

var sinkRecords = []map[string]any{
	{"temp": 21.5, "id": 1.0, "name": "a<b>&", "big": 1e21, "small": 1e-7},
	{"nested": map[string]any{"z": 1, "a": []any{"x", nil}}, "id": int64(2)},
	{"id": 3, "name": "line\nbreak \"quoted\", comma"},
}

func TestSinkGolden(t *testing.T) {
	tests := []struct {
		name string
		keys string
		want string
	}{
		{"json", "", `{"big":1e+21,"id":1,"name":"a<b>&","small":1e-7,"temp":21.5}
{"id":2,"nested":{"a":["x",null],"z":1}}
{"id":3,"name":"line\nbreak \"quoted\", comma"}
`},
		{"csv", "format: csv\ncolumns: [id, name, temp]", `id,name,temp
1,a<b>&,21.5
2,,
3,"line
break ""quoted"", comma",
`},
		{"csv semicolon", "format: csv\ncolumns: [id, temp]\ncsv_delimiter: ';'", "id;temp\n1;21.5\n2;\n3;\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "dir", "out.jsonl")
			cfg := loadSink(t, "path: "+path+"\n"+tt.keys)
			s := conntest.OpenSink(t, cfg, 0, 1)
			ctx := context.Background()
			require.NoError(t, s.Write(ctx, conntest.Records(sinkRecords[:2]...)))
			require.NoError(t, s.Flush(ctx))
			require.NoError(t, s.Write(ctx, conntest.Records(sinkRecords[2:]...)))
			require.NoError(t, s.Close(ctx))
			require.Equal(t, tt.want, readFile(t, path))
			require.NoError(t, s.Close(ctx), "Close twice is harmless")
		})
	}
}

func TestSinkFlushMakesDataVisible(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := loadSink(t, "path: "+path+"\nsync: true")
	s := conntest.OpenSink(t, cfg, 0, 1)
	ctx := context.Background()
	require.NoError(t, s.Write(ctx, conntest.Records(map[string]any{"a": 1})))
	require.Empty(t, readFile(t, path), "buffered until Flush")
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, "{\"a\":1}\n", readFile(t, path))
	require.NoError(t, s.Close(ctx))
}

func TestSinkTruncateOrAppend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.csv")
	run := func(keys string, recs ...map[string]any) {
		cfg := loadSink(t, "path: "+path+"\nformat: csv\ncolumns: [a]\n"+keys)
		s := conntest.OpenSink(t, cfg, 0, 1)
		require.NoError(t, s.Write(context.Background(), conntest.Records(recs...)))
		require.NoError(t, s.Close(context.Background()))
	}
	run("", map[string]any{"a": "1"})
	run("", map[string]any{"a": "2"})
	require.Equal(t, "a\n2\n", readFile(t, path), "truncated by default")
	run("append: true", map[string]any{"a": "3"})
	require.Equal(t, "a\n2\n3\n", readFile(t, path), "no second header")
	require.NoError(t, os.Remove(path))
	run("append: true", map[string]any{"a": "4"})
	require.Equal(t, "a\n4\n", readFile(t, path), "header for a new file")
}

func TestOutputPath(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		path   string
		format codec.Format
		k, p   int
		want   string
	}{
		{"out/x.jsonl", codec.JSON, 0, 1, "out/x.jsonl"},
		{"out/x.jsonl", codec.JSON, 1, 3, "out/x-1.jsonl"},
		{"out/x", codec.JSON, 2, 3, "out/x-2"},
		{"out/x.tar.gz", codec.JSON, 0, 2, "out/x.tar-0.gz"},
		{"out/.x", codec.JSON, 0, 2, "out/.x-0"},
		{"out/", codec.JSON, 0, 1, "out/part-0.jsonl"},
		{"out/", codec.CSV, 3, 4, "out/part-3.csv"},
		{dir, codec.JSON, 1, 2, filepath.Join(dir, "part-1.jsonl")},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, OutputPath(tt.path, tt.format, tt.k, tt.p), "%+v", tt)
	}
}

func TestSinkParallelFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := loadSink(t, "path: "+filepath.Join(dir, "out.jsonl"))
	ctx := context.Background()
	for k := range 2 {
		s := conntest.OpenSink(t, cfg, k, 2)
		require.NoError(t, s.Write(ctx, conntest.Records(map[string]any{"k": k})))
		require.NoError(t, s.Close(ctx))
	}
	require.Equal(t, "{\"k\":0}\n", readFile(t, filepath.Join(dir, "out-0.jsonl")))
	require.Equal(t, "{\"k\":1}\n", readFile(t, filepath.Join(dir, "out-1.jsonl")))
}

func TestSinkUnencodable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	s := conntest.OpenSink(t, loadSink(t, "path: "+path), 0, 1)
	ctx := context.Background()
	err := s.Write(ctx, conntest.Records(map[string]any{"ok": 1}, map[string]any{"x": math.NaN()}))
	require.EqualError(t, err, `file sink "out": `+path+`: field "x": json: unsupported value: NaN`)
	var re *pipeline.SinkRecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 1, re.Index, "the second record of the batch")
	require.NoError(t, s.Close(ctx))
	require.Equal(t, "{\"ok\":1}\n", readFile(t, path), "the bad record leaves nothing behind")
}

func TestSinkOpenError(t *testing.T) {
	dir := t.TempDir()
	blocker := writeFile(t, filepath.Join(dir, "file"), "")
	cfg := loadSink(t, "path: "+filepath.Join(blocker, "out.jsonl"))
	s, err := cfg.NewSink()
	require.NoError(t, err)
	err = s.Open(context.Background(), &pipeline.SinkContext{SubtaskInfo: conntest.Info("out", 0, 1)})
	require.ErrorContains(t, err, `file sink "out"`)
	require.NoError(t, s.Close(context.Background()))
}

func TestSinkLoad(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string
	}{
		{body: "path: out.jsonl"},
		{body: "path: out.csv\nformat: csv\ncolumns: [a, b]\nappend: true\nsync: true"},
		{body: "format: json", wantErr: `missing required key "path"`},
		{body: "path: out.csv\nformat: csv", wantErr: "columns: format csv needs the list of columns"},
		{body: "path: out\nformat: text", wantErr: `format: must be json or csv, not "text"`},
		{body: "path: out\ncolumns: [a]", wantErr: "t.yaml:9:14: columns: only applies to format csv"},
		{body: "path: out/\nroll_size: 64KiB\nroll_interval: 15m"},
		{body: "path: out/\nroll_size: 0", wantErr: "roll_size: must be positive"},
		{body: "path: out/\nroll_size: 12XB", wantErr: `t.yaml:9:16: roll_size: "12XB" is not a size`},
		{body: "path: out/\nroll_interval: -1s", wantErr: "roll_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			cfg, err := conntest.LoadSink(t, "file", tt.body)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, pipeline.ExactlyOnce, cfg.(*SinkConfig).Guarantee(), "with checkpoints; the plan weighs the checkpoint block")
		})
	}
}
