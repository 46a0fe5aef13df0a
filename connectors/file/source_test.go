package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func loadSource(t *testing.T, body string) *SourceConfig {
	t.Helper()
	cfg, err := conntest.LoadSource(t, "file", body)
	require.NoError(t, err)
	return cfg.(*SourceConfig)
}

func TestSourceFormats(t *testing.T) {
	tests := []struct {
		name    string
		keys    string
		content string
		want    []map[string]any
	}{
		{"json", "", "{\"id\":1,\"t\":21.5}\n\n{\"id\":2,\"s\":\"x\"}\r\n{\"id\":3}",
			[]map[string]any{{"id": int64(1), "t": 21.5}, {"id": int64(2), "s": "x"}, {"id": int64(3)}}},
		{"csv", "format: csv", "\xef\xbb\xbfid,name\n1,\"a, b\"\n\n2,\"multi\nline\"\n",
			[]map[string]any{{"id": "1", "name": "a, b"}, {"id": "2", "name": "multi\nline"}}},
		{"csv delimiter", "format: csv\ncsv_delimiter: \"\\t\"", "a\tb\n1\t2\n",
			[]map[string]any{{"a": "1", "b": "2"}}},
		{"text keeps blank lines", "format: text", "one\n\nthree\n",
			[]map[string]any{{"line": "one"}, {"line": ""}, {"line": "three"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, filepath.Join(t.TempDir(), "in.txt"), tt.content)
			cfg := loadSource(t, fmt.Sprintf("path: %s\n%s", path, tt.keys))
			got := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), 5*time.Second))
			require.Equal(t, tt.want, got)
		})
	}
}

// manyLines returns n JSON lines {"i": 0..n-1}.
func manyLines(from, n int) string {
	var sb strings.Builder
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&sb, "{\"i\":%d}\n", i)
	}
	return sb.String()
}

func ids(fields []map[string]any) []int {
	out := make([]int, len(fields))
	for i, f := range fields {
		out[i] = int(f["i"].(int64))
	}
	return out
}

func seq(from, to int) []int {
	out := []int{}
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestSourceSplitsAcrossSubtasks(t *testing.T) {
	dir := t.TempDir()
	// Names sort as b0 < b1 < b2 < b3 whatever the creation order.
	for _, j := range []int{2, 0, 3, 1} {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("b%d.jsonl", j)), manyLines(j*1000, 1000))
	}
	writeFile(t, filepath.Join(dir, "other.txt"), "not matched")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "b9.jsonl"), 0o755)) // a directory is not a file

	cfg := loadSource(t, "path: "+filepath.Join(dir, "b*.jsonl"))
	// Subtask 1 of 2 reads files 1 and 3, in order, one split per batch.
	batches := conntest.Drain(t, conntest.OpenSource(t, cfg, 1, 2, nil), 5*time.Second)
	require.Equal(t, append(seq(1000, 2000), seq(3000, 4000)...), ids(conntest.Fields(batches)))
	for _, b := range batches {
		if len(b.Records) > 0 {
			require.Contains(t, []int{1, 3}, b.Split)
			first := int(b.Records[0].Fields["i"].(int64))
			require.Equal(t, first/1000, b.Split)
		}
	}
	// Each file's split ends exactly once, with its last batch.
	done := map[int]int{}
	for i, b := range batches {
		if b.SplitDone {
			done[b.Split]++
			if i+1 < len(batches) {
				require.NotEqual(t, b.Split, batches[i+1].Split, "SplitDone before the end of split %d", b.Split)
			}
		}
	}
	require.Equal(t, map[int]int{1: 1, 3: 1}, done)

	// A subtask without files ends at once.
	b := conntest.ReadOnce(t, conntest.OpenSource(t, cfg, 4, 5, nil), time.Second)
	require.ErrorContains(t, b.Err, "EOF")

	// A directory reads its non-hidden regular files.
	writeFile(t, filepath.Join(dir, ".hidden"), "{}\n")
	cfg = loadSource(t, "path: "+dir+"\nformat: text")
	got := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), 5*time.Second))
	require.Len(t, got, 4001)
	require.Equal(t, "not matched", got[4000]["line"])
}

func TestSourceRestore(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl"), manyLines(0, 2500))
	writeFile(t, filepath.Join(dir, "b.jsonl"), manyLines(2500, 10))
	writeFile(t, filepath.Join(dir, "c.jsonl"), manyLines(2510, 1500))
	cfg := loadSource(t, "path: "+filepath.Join(dir, "*.jsonl"))

	all := conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), 5*time.Second)
	require.Equal(t, seq(0, 4010), ids(conntest.Fields(all)))
	// Restoring from the position after each batch reads exactly the rest.
	seen := 0
	for i, b := range all {
		seen += len(b.Records)
		rest := conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, b.Position), 5*time.Second)
		require.Equal(t, seq(seen, 4010), ids(conntest.Fields(rest)), "after batch %d", i)
	}
}

func TestSourceSplitDone(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl"), "{\"i\":0}\n\n\n")      // blank lines after the last record
	writeFile(t, filepath.Join(dir, "b.jsonl"), "{\"i\":1}\n{\"i\":2}") // no final line break
	writeFile(t, filepath.Join(dir, "c.jsonl"), "")                     // empty
	cfg := loadSource(t, "path: "+filepath.Join(dir, "*.jsonl"))
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	type batch struct {
		ids   []int
		split int
		done  bool
	}
	var got []batch
	for _, b := range conntest.Drain(t, src, 5*time.Second) {
		got = append(got, batch{ids(conntest.Fields([]conntest.Batch{b})), b.Split, b.SplitDone})
	}
	require.Equal(t, []batch{
		{[]int{0}, 0, true},  // the trailing blank lines are read with it: the end is seen
		{[]int{1}, 1, false}, // the unterminated "{"i":2}" waits for the end of the file
		{[]int{2}, 1, true},
		{[]int{}, 2, true}, // an empty file ends its split in an empty batch
	}, got)
}

func TestSourceCSVRestoreReadsHeader(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "in.csv"), "\"id\",\"v\"\n1,a\n2,b\n3,c\n")
	cfg := loadSource(t, "path: "+path+"\nformat: csv")
	pos := EncodePosition(Position{Parallelism: 1, Entries: []PositionEntry{{Name: path, Offset: int64(len("\"id\",\"v\"\n1,a\n")), Line: 3}}})
	got := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, pos), 5*time.Second))
	require.Equal(t, []map[string]any{{"id": "2", "v": "b"}, {"id": "3", "v": "c"}}, got)
}

func TestSourceInvalidLines(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "in.jsonl"), "{\"a\":1}\n{\"a\":\n[1]\r\n\n{\"a\":4}\n")
	batches := conntest.Drain(t, conntest.OpenSource(t, loadSource(t, "path: "+path), 0, 1, nil), time.Second)
	require.Equal(t, []map[string]any{{"a": int64(1)}, {"a": int64(4)}}, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{
		{Fields: map[string]any{"raw": `{"a":`}, Err: path + ":2: invalid JSON: unexpected end of JSON input"},
		{Fields: map[string]any{"raw": "[1]"}, Err: path + `:3: invalid JSON: a line must be a JSON object, not "[1]"`},
	}, conntest.Failures(batches))

	// csv: the raw row text, line breaks of quoted fields included.
	path = writeFile(t, filepath.Join(t.TempDir(), "in.csv"), "id,name\n1,\"a\nb\",x\n2,c\n3,\"open\n")
	batches = conntest.Drain(t, conntest.OpenSource(t, loadSource(t, "path: "+path+"\nformat: csv"), 0, 1, nil), time.Second)
	require.Equal(t, []map[string]any{{"id": "2", "name": "c"}}, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{
		{Fields: map[string]any{"raw": "1,\"a\nb\",x"}, Err: path + ":2: invalid CSV: the record has 3 fields, the header has 2"},
		{Fields: map[string]any{"raw": "3,\"open\n"}, Err: path + ":5: invalid CSV: a quoted field is not closed"},
	}, conntest.Failures(batches))
}

func TestSourceFailedLinesMovePosition(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.jsonl"), "bad\n\nworse")
	writeFile(t, filepath.Join(dir, "b.jsonl"), manyLines(0, batchLines)+strings.Repeat("x\n", batchLines)+manyLines(batchLines, 10))
	cfg := loadSource(t, "path: "+filepath.Join(dir, "*.jsonl"))
	all := conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), 5*time.Second)
	type batch struct {
		records, failed int
		split           int
		done            bool
	}
	var got []batch
	for _, b := range all {
		got = append(got, batch{len(b.Records), len(b.Failed), b.Split, b.SplitDone})
		require.NotNil(t, b.Position)
	}
	require.Equal(t, []batch{
		{0, 1, 0, false}, // the unterminated "worse" waits for the end of the file
		{0, 1, 0, true},  // failed lines end the split like records do
		{batchLines, 0, 1, false},
		{0, batchLines, 1, false}, // a batch of failed lines only carries its position
		{10, 0, 1, true},
	}, got)
	require.Equal(t, conntest.Failure{Fields: map[string]any{"raw": "worse"},
		Err: filepath.Join(dir, "a.jsonl") + `:3: invalid JSON: a line must be a JSON object, not "worse"`}, conntest.Failures(all)[1])
	require.Equal(t, filepath.Join(dir, "b.jsonl")+fmt.Sprintf(`:%d: invalid JSON: a line must be a JSON object, not "x"`, batchLines+1),
		conntest.Failures(all)[2].Err)

	// Restoring from the position after each batch reads exactly the rest,
	// failed lines included.
	seenRecs, seenFailed := 0, 0
	for i, b := range all {
		seenRecs += len(b.Records)
		seenFailed += len(b.Failed)
		rest := conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, b.Position), 5*time.Second)
		require.Equal(t, seq(seenRecs, batchLines+10), ids(conntest.Fields(rest)), "after batch %d", i)
		require.Len(t, conntest.Failures(rest), 2+batchLines-seenFailed, "after batch %d", i)
	}
}

func TestSourceLongLines(t *testing.T) {
	long := strings.Repeat("y", 3<<20) // beyond any initial buffer
	path := writeFile(t, filepath.Join(t.TempDir(), "in.jsonl"), `{"a":"`+long+"\"}\n{\"b\":1}\n{\"c\":\""+long[:70000]+`"}`)
	cfg := loadSource(t, "path: "+path)
	got := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), 5*time.Second))
	require.Equal(t, []map[string]any{{"a": long}, {"b": int64(1)}, {"c": long[:70000]}}, got)
}

func TestSourceNoMatch(t *testing.T) {
	for _, path := range []string{filepath.Join(t.TempDir(), "*.jsonl"), filepath.Join(t.TempDir(), "missing.jsonl")} {
		cfg := loadSource(t, "path: "+path)
		src, err := cfg.NewSource()
		require.NoError(t, err)
		err = src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("in", 0, 1)})
		require.EqualError(t, err, fmt.Sprintf("file source %q: no file matches %s", "in", path))
	}
}

// appendTo appends text to a file.
func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(text)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// readUntil reads from src until it has n records or the timeout passes.
func readUntil(t *testing.T, src pipeline.Source, n int, timeout time.Duration) ([]map[string]any, []byte) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got []map[string]any
	var pos []byte
	for len(got) < n {
		left := time.Until(deadline)
		require.Positive(t, left, "got %d of %d records: %v", len(got), n, got)
		b := conntest.ReadOnce(t, src, left)
		require.NoError(t, b.Err)
		got = append(got, conntest.Fields([]conntest.Batch{b})...)
		pos = b.Position
	}
	return got, pos
}

func TestSourceFollow(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, filepath.Join(dir, "a.log"), "a1\npartial")
	b := writeFile(t, filepath.Join(dir, "b.log"), "")
	cfg := loadSource(t, "path: "+filepath.Join(dir, "*.log")+"\nformat: text\nfollow: true\npoll_interval: 5ms")
	require.False(t, cfg.Bounded())
	src := conntest.OpenSource(t, cfg, 0, 1, nil)

	got, _ := readUntil(t, src, 1, 5*time.Second)
	require.Equal(t, []map[string]any{{"line": "a1"}}, got)

	// A partial line waits for its end; nothing else is there.
	r := conntest.ReadOnce(t, src, 50*time.Millisecond)
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.Empty(t, r.Records)

	appendTo(t, a, " line\n")
	appendTo(t, b, "b1\nb2\n")
	got, pos := readUntil(t, src, 3, 5*time.Second)
	require.ElementsMatch(t, []map[string]any{{"line": "partial line"}, {"line": "b1"}, {"line": "b2"}}, got)

	// The position covers both files: a restore resumes each of them.
	appendTo(t, a, "a3\n")
	appendTo(t, b, "b3\n")
	restored := conntest.OpenSource(t, cfg, 0, 1, pos)
	got, _ = readUntil(t, restored, 2, 5*time.Second)
	require.ElementsMatch(t, []map[string]any{{"line": "a3"}, {"line": "b3"}}, got)

	// Truncation starts the file over.
	require.NoError(t, os.WriteFile(b, []byte("new\n"), 0o644))
	got, _ = readUntil(t, restored, 1, 5*time.Second)
	require.Equal(t, []map[string]any{{"line": "new"}}, got)
}

func TestSourceFollowFailedLines(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "a.log"), "")
	cfg := loadSource(t, "path: "+path+"\nfollow: true\npoll_interval: 5ms")
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	appendTo(t, path, "oops\n")
	b := conntest.ReadOnce(t, src, 5*time.Second)
	require.NoError(t, b.Err)
	require.Empty(t, b.Records)
	require.Equal(t, []conntest.Failure{{Fields: map[string]any{"raw": "oops"},
		Err: path + `:1: invalid JSON: a line must be a JSON object, not "oops"`}}, conntest.Failures([]conntest.Batch{b}))
	pos, err := DecodePosition(b.Position)
	require.NoError(t, err)
	require.Equal(t, Position{Subtask: 0, Parallelism: 1, Entries: []PositionEntry{{Name: path, Offset: 5, Line: 2}}}, pos)
}

func TestSourceFollowHonoursContext(t *testing.T) {
	path := writeFile(t, filepath.Join(t.TempDir(), "a.log"), "")
	cfg := loadSource(t, "path: "+path+"\nfollow: true\npoll_interval: 1h")
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	start := time.Now()
	r := conntest.ReadOnce(t, src, 20*time.Millisecond)
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestPositionEncoding(t *testing.T) {
	pos := Position{Subtask: 2, Parallelism: 3, Entries: []PositionEntry{
		{Name: "data/a.jsonl", Offset: 1 << 40, Line: 12345}, {Name: "", Offset: 0, Line: 1, Done: true}}}
	got, err := DecodePosition(EncodePosition(pos))
	require.NoError(t, err)
	require.Equal(t, pos, got)
	require.Len(t, EncodePosition(Position{Subtask: 2, Parallelism: 3, Entries: pos.Entries[:1]}), 1+1+1+1+6+2+1+1+12)

	// Version 1 (no subtask, parallelism or flags) is still read.
	v1 := append([]byte{1, 1, 5, 2, 3}, "a.js"[:3]...)
	got, err = DecodePosition(v1)
	require.NoError(t, err)
	require.Equal(t, Position{Entries: []PositionEntry{{Name: "a.j", Offset: 5, Line: 2}}}, got)

	for _, bad := range [][]byte{nil, {0}, {3}, {2}, {2, 0}, {2, 3, 3, 0}, {2, 0, 1, 1}, {2, 0, 1, 1, 5, 1, 0, 50, 'a'},
		{2, 0, 1, 1, 5, 1, 2, 1, 'a'}, {1, 1, 5, 1, 50, 'a'}, append(EncodePosition(pos), 0)} {
		_, err := DecodePosition(bad)
		require.ErrorContains(t, err, "file source position is corrupt", "%v", bad)
	}
}

func TestSourceLoad(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string
	}{
		{body: "path: in.jsonl"},
		{body: "path: in.csv\nformat: csv\ncsv_delimiter: ';'\nfollow: true\npoll_interval: 1s"},
		{body: "format: csv", wantErr: `missing required key "path"`},
		{body: "path: '[x'", wantErr: `path: "[x" is not a valid glob`},
		{body: "path: x\nformat: xml", wantErr: `t.yaml:7:13: format: must be json, csv or text, not "xml"`},
		{body: "path: x\ncsv_delimiter: ab", wantErr: "csv_delimiter: must be one ASCII character"},
		{body: "path: x\non_decode_error: skip", wantErr: `unknown key "on_decode_error"`},
		{body: "path: x\nfollow: true\npoll_interval: 0", wantErr: "poll_interval: must be positive"},
		{body: "path: x\ndecode_workers: -1", wantErr: "decode_workers: must be 0 (GOMAXPROCS) or more"},
		{body: "path: x\ndecode_workers: 4"},
		{body: "path: x\nfolow: true", wantErr: `unknown key "folow" in source "in" (file) (did you mean "follow"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			cfg, err := conntest.LoadSource(t, "file", tt.body)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			c := cfg.(*SourceConfig)
			require.Equal(t, pipeline.ExactlyOnce, c.Guarantee())
			require.Equal(t, c.Follow, !c.Bounded())
			if c.Format == codec.CSV {
				require.Equal(t, byte(';'), c.Delimiter())
				require.Equal(t, time.Second, c.PollInterval.D())
			}
		})
	}
}
