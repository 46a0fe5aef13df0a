package file

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// openParts builds and opens subtask k of p of the sink in transactional
// mode (the pipeline checkpoints), restoring the committables.
func openParts(t *testing.T, cfg *SinkConfig, k, p int, committables [][]byte, opts ...func(*sink)) *sink {
	t.Helper()
	s := newParts(t, cfg, opts...)
	require.NoError(t, s.Open(context.Background(), partsContext(k, p, committables)))
	return s
}

func newParts(t *testing.T, cfg *SinkConfig, opts ...func(*sink)) *sink {
	t.Helper()
	ps, err := cfg.NewSink()
	require.NoError(t, err)
	s := ps.(*sink)
	for _, o := range opts {
		o(s)
	}
	return s
}

func partsContext(k, p int, committables [][]byte) *pipeline.SinkContext {
	info := conntest.Info("out", k, p)
	info.Logger = slog.New(slog.DiscardHandler)
	return &pipeline.SinkContext{SubtaskInfo: info, Committables: committables, Checkpointing: true}
}

func withFS(fsys fileSystem) func(*sink) { return func(s *sink) { s.fs = fsys } }

// crash drops the sink without Close, as a killed process would; only the
// file handle is closed so that the test does not leak it.
func crash(s *sink) {
	if s.parts != nil && s.parts.cur != nil {
		_ = s.parts.cur.f.Close()
	}
}

// recs returns records {"i": from} ... {"i": to-1}.
func recs(from, to int) []pipeline.Record {
	var out []map[string]any
	for i := from; i < to; i++ {
		out = append(out, map[string]any{"i": i})
	}
	return conntest.Records(out...)
}

// lines is what recs(from, to) looks like in JSON lines.
func lines(from, to int) string {
	var sb strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&sb, "{\"i\":%d}\n", i)
	}
	return sb.String()
}

// listDir returns the visible (final) and hidden file names of dir, sorted.
func listDir(t *testing.T, dir string) (visible, hidden []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			hidden = append(hidden, e.Name())
		} else {
			visible = append(visible, e.Name())
		}
	}
	return visible, hidden
}

// output is what a reader sees: the visible files of dir, concatenated in
// name order.
func output(t *testing.T, dir string) string {
	t.Helper()
	visible, _ := listDir(t, dir)
	var sb strings.Builder
	for _, name := range visible {
		sb.WriteString(readFile(t, filepath.Join(dir, name)))
	}
	return sb.String()
}

func decode(t *testing.T, b []byte) committable {
	t.Helper()
	c, err := decodeCommittable(b)
	require.NoError(t, err)
	return c
}

func finals(c committable) []string {
	var out []string
	for _, e := range c.Files {
		out = append(out, e.Final)
	}
	return out
}

func TestPartSinkCommitMakesVisible(t *testing.T) {
	dir := t.TempDir()
	s := openParts(t, loadSink(t, "path: "+dir+"/"), 0, 1, nil)
	ctx := context.Background()

	require.NoError(t, s.Write(ctx, recs(0, 2)))
	require.NoError(t, s.Flush(ctx))
	require.NoError(t, s.Write(ctx, recs(2, 3)))
	require.NoError(t, s.Flush(ctx))
	visible, hidden := listDir(t, dir)
	require.Empty(t, visible, "Flush makes nothing visible")
	require.Equal(t, []string{".part-0-000000.jsonl.inprogress"}, hidden)

	c1, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"v":1,"checkpoint":1,"subtask":0,"dir":%q,"files":[
		{"pending":".part-0-000000.jsonl.pending","final":"part-0-000000.jsonl","size":%d}]}`,
		dir, len(lines(0, 3))), string(c1))
	visible, hidden = listDir(t, dir)
	require.Empty(t, visible, "pre-committed is not visible")
	require.Equal(t, []string{".part-0-000000.jsonl.pending"}, hidden)

	require.NoError(t, s.Commit(ctx, [][]byte{c1}))
	visible, hidden = listDir(t, dir)
	require.Equal(t, []string{"part-0-000000.jsonl"}, visible)
	require.Empty(t, hidden)
	require.Equal(t, lines(0, 3), output(t, dir))

	require.NoError(t, s.Commit(ctx, [][]byte{c1}), "Commit twice is harmless")
	require.NoError(t, s.Commit(ctx, [][]byte{c1, c1}))
	require.Equal(t, lines(0, 3), output(t, dir))

	c2, err := s.PreCommit(ctx, 2)
	require.NoError(t, err)
	require.Empty(t, decode(t, c2).Files, "committed parts are not repeated")
	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx), "Close twice is harmless")
	require.Equal(t, lines(0, 3), output(t, dir))
}

func TestPartSinkEmptyTransaction(t *testing.T) {
	dir := t.TempDir()
	s := openParts(t, loadSink(t, "path: "+dir+"/"), 0, 1, nil)
	ctx := context.Background()
	c1, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"v":1,"checkpoint":1,"subtask":0,"dir":%q,"files":[]}`, dir), string(c1))
	require.NoError(t, s.Commit(ctx, [][]byte{c1}))
	visible, hidden := listDir(t, dir)
	require.Empty(t, visible)
	require.Empty(t, hidden, "no records, no file")
	require.NoError(t, s.Close(ctx))
}

func TestPartSinkCrashRestore(t *testing.T) {
	for _, committedBeforeCrash := range []bool{false, true} {
		t.Run(fmt.Sprintf("committed before crash %v", committedBeforeCrash), func(t *testing.T) {
			dir := t.TempDir()
			cfg := loadSink(t, "path: "+filepath.Join(dir, "result.jsonl"))
			ctx := context.Background()
			s := openParts(t, cfg, 0, 1, nil)
			require.NoError(t, s.Write(ctx, recs(0, 3)))
			c1, err := s.PreCommit(ctx, 1)
			require.NoError(t, err)
			if committedBeforeCrash {
				require.NoError(t, s.Commit(ctx, [][]byte{c1}))
			}
			require.NoError(t, s.Write(ctx, recs(3, 5)))
			_, err = s.PreCommit(ctx, 2) // checkpoint 2 never completes
			require.NoError(t, err)
			require.NoError(t, s.Write(ctx, recs(5, 7)))
			require.NoError(t, s.Flush(ctx))
			crash(s)
			_, hidden := listDir(t, dir)
			require.Contains(t, hidden, ".result-0-000001.jsonl.pending")
			require.Contains(t, hidden, ".result-0-000002.jsonl.inprogress")

			// Restore checkpoint 1.
			s = openParts(t, cfg, 0, 1, [][]byte{c1})
			visible, hidden := listDir(t, dir)
			require.Equal(t, []string{"result-0-000000.jsonl"}, visible)
			require.Empty(t, hidden, "checkpoint 2 and later are aborted")
			require.Equal(t, lines(0, 3), output(t, dir), "exactly the records up to checkpoint 1")

			// The source replays from checkpoint 1.
			require.NoError(t, s.Write(ctx, recs(3, 8)))
			c3, err := s.PreCommit(ctx, 3)
			require.NoError(t, err)
			require.Equal(t, []string{"result-0-000001.jsonl"}, finals(decode(t, c3)))
			require.NoError(t, s.Commit(ctx, [][]byte{c3}))
			require.NoError(t, s.Close(ctx))
			require.Equal(t, lines(0, 8), output(t, dir), "every record exactly once")
		})
	}
}

// A checkpoint that fails after its PreCommit leaves its parts pending; the
// next committable repeats them, so restoring the next checkpoint alone
// commits both.
func TestPartSinkCommittableRepeatsUncommitted(t *testing.T) {
	dir := t.TempDir()
	cfg := loadSink(t, "path: "+dir+"/")
	ctx := context.Background()
	s := openParts(t, cfg, 0, 1, nil)
	require.NoError(t, s.Write(ctx, recs(0, 2)))
	_, err := s.PreCommit(ctx, 1) // checkpoint 1 fails: never committed
	require.NoError(t, err)
	require.NoError(t, s.Write(ctx, recs(2, 4)))
	c2, err := s.PreCommit(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"part-0-000000.jsonl", "part-0-000001.jsonl"}, finals(decode(t, c2)))
	require.NoError(t, s.Write(ctx, recs(4, 5)))
	crash(s)

	s = openParts(t, cfg, 0, 1, [][]byte{c2})
	require.Equal(t, lines(0, 4), output(t, dir))
	_, hidden := listDir(t, dir)
	require.Empty(t, hidden)
	require.NoError(t, s.Close(ctx))
}

func TestPartSinkLostOrDamaged(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, pending string)
		want   error
	}{
		{"lost", func(t *testing.T, pending string) { require.NoError(t, os.Remove(pending)) }, ErrPartLost},
		{"torn", func(t *testing.T, pending string) { require.NoError(t, os.Truncate(pending, 3)) }, ErrPartDamaged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := loadSink(t, "path: "+dir+"/")
			ctx := context.Background()
			s := openParts(t, cfg, 0, 1, nil)
			require.NoError(t, s.Write(ctx, recs(0, 2)))
			c1, err := s.PreCommit(ctx, 1)
			require.NoError(t, err)
			tt.damage(t, filepath.Join(dir, ".part-0-000000.jsonl.pending"))

			err = s.Commit(ctx, [][]byte{c1})
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, `file sink "out": commit checkpoint 1: `)
			require.Empty(t, output(t, dir))

			err = newParts(t, cfg).Open(ctx, partsContext(0, 1, [][]byte{c1}))
			require.ErrorIs(t, err, tt.want, "a restore cannot commit it either")
		})
	}
}

func TestPartSinkBadCommittable(t *testing.T) {
	dir := t.TempDir()
	s := openParts(t, loadSink(t, "path: "+dir+"/"), 0, 1, nil)
	ctx := context.Background()
	for in, want := range map[string]string{
		`nope`:               "decode committable",
		`{"v":2,"files":[]}`: "committable has version 2",
		`{"v":1,"dir":"x","files":[{"pending":".a.pending","final":"../a"}]}`: "bad part file names",
		`{"v":1,"dir":"x","files":[{"pending":"a","final":"b"}]}`:             "bad part file names",
	} {
		require.ErrorContains(t, s.Commit(ctx, [][]byte{[]byte(in)}), want, in)
	}
}

func TestPartSinkRollSize(t *testing.T) {
	tests := []struct {
		name   string
		keys   string
		header string
		line   int // bytes per record
	}{
		{"json", "path: DIR/out.jsonl\nroll_size: 16", "", len(`{"i":0}` + "\n")},
		{"csv", "path: DIR/out.csv\nformat: csv\ncolumns: [i]\nroll_size: 7B", "i\n", len("0\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := loadSink(t, strings.ReplaceAll(tt.keys, "DIR", dir))
			ctx := context.Background()
			s := openParts(t, cfg, 0, 1, nil)
			require.NoError(t, s.Write(ctx, recs(0, 5)))
			require.NoError(t, s.Write(ctx, recs(5, 7)))
			visible, hidden := listDir(t, dir)
			require.Empty(t, visible, "rolled files are pending, not visible")
			require.Len(t, hidden, 4)

			c1, err := s.PreCommit(ctx, 1)
			require.NoError(t, err)
			require.Len(t, decode(t, c1).Files, 4, "every rolled part is in the committable")
			visible, _ = listDir(t, dir)
			require.Empty(t, visible)

			require.NoError(t, s.Commit(ctx, [][]byte{c1}))
			visible, hidden = listDir(t, dir)
			require.Len(t, visible, 4)
			require.Empty(t, hidden)
			var all strings.Builder
			for i, name := range visible {
				got := readFile(t, filepath.Join(dir, name))
				require.True(t, strings.HasPrefix(got, tt.header), "each part has the header")
				if i < 3 {
					require.Len(t, got, len(tt.header)+2*tt.line, "two records per part")
				}
				all.WriteString(strings.TrimPrefix(got, tt.header))
			}
			want := lines(0, 7)
			if tt.header != "" {
				want = strings.NewReplacer("{\"i\":", "", "}", "").Replace(want)
			}
			require.Equal(t, want, all.String())
			require.NoError(t, s.Close(ctx))
		})
	}
}

func TestPartSinkRollSizeBigRecord(t *testing.T) {
	dir := t.TempDir()
	s := openParts(t, loadSink(t, "path: "+dir+"/\nroll_size: 4"), 0, 1, nil)
	ctx := context.Background()
	require.NoError(t, s.Write(ctx, recs(0, 3)))
	c1, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.Len(t, decode(t, c1).Files, 3, "a record larger than roll_size gets a part of its own")
	require.NoError(t, s.Commit(ctx, [][]byte{c1}))
	require.Equal(t, lines(0, 3), output(t, dir))
}

func TestPartSinkRollInterval(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1000, 0)
	clock := func(s *sink) { s.now = func() time.Time { return now } }
	s := openParts(t, loadSink(t, "path: "+dir+"/\nroll_interval: 10s"), 0, 1, nil, clock)
	ctx := context.Background()

	require.NoError(t, s.Write(ctx, recs(0, 1)))
	now = now.Add(5 * time.Second)
	require.NoError(t, s.Flush(ctx))
	require.NoError(t, s.Write(ctx, recs(1, 2)))
	_, hidden := listDir(t, dir)
	require.Equal(t, []string{".part-0-000000.jsonl.inprogress"}, hidden)

	now = now.Add(5 * time.Second)
	require.NoError(t, s.Flush(ctx), "Flush rolls a part that is old enough")
	visible, hidden := listDir(t, dir)
	require.Empty(t, visible, "a rolled part waits for its checkpoint")
	require.Equal(t, []string{".part-0-000000.jsonl.pending"}, hidden)

	require.NoError(t, s.Write(ctx, recs(2, 3)))
	now = now.Add(10 * time.Second)
	require.NoError(t, s.Write(ctx, recs(3, 4)), "Write rolls too")
	_, hidden = listDir(t, dir)
	require.Equal(t, []string{".part-0-000000.jsonl.pending", ".part-0-000001.jsonl.pending", ".part-0-000002.jsonl.inprogress"}, hidden)

	c1, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s.Commit(ctx, [][]byte{c1}))
	visible, _ = listDir(t, dir)
	require.Equal(t, []string{"part-0-000000.jsonl", "part-0-000001.jsonl", "part-0-000002.jsonl"}, visible)
	require.Equal(t, lines(0, 4), output(t, dir))
}

func TestPartSinkParallelSubtasks(t *testing.T) {
	dir := t.TempDir()
	cfg := loadSink(t, "path: "+filepath.Join(dir, "out.jsonl"))
	ctx := context.Background()
	var cs [2][]byte
	for k := range 2 {
		s := openParts(t, cfg, k, 2, nil)
		require.NoError(t, s.Write(ctx, recs(10*k, 10*k+2)))
		c, err := s.PreCommit(ctx, 1)
		require.NoError(t, err)
		cs[k] = c
		require.NoError(t, s.Write(ctx, recs(10*k+2, 10*k+3)))
		require.NoError(t, s.parts.w.Flush()) // as a full buffer would
		crash(s)
	}

	s0 := openParts(t, cfg, 0, 2, [][]byte{cs[0]})
	visible, hidden := listDir(t, dir)
	require.Equal(t, []string{"out-0-000000.jsonl"}, visible)
	require.Equal(t, []string{".out-1-000000.jsonl.pending", ".out-1-000001.jsonl.inprogress"}, hidden,
		"subtask 0 leaves subtask 1's files alone")
	require.NoError(t, s0.Write(ctx, recs(2, 3)))

	s1 := openParts(t, cfg, 1, 2, [][]byte{cs[1]})
	visible, hidden = listDir(t, dir)
	require.Equal(t, []string{"out-0-000000.jsonl", "out-1-000000.jsonl"}, visible)
	require.Equal(t, []string{".out-0-000001.jsonl.inprogress"}, hidden, "subtask 1 leaves subtask 0's files alone")
	require.Equal(t, lines(10, 12), readFile(t, filepath.Join(dir, "out-1-000000.jsonl")))
	require.NoError(t, s0.Close(ctx))
	require.NoError(t, s1.Close(ctx))
}

// TestPartSinkScaleDown: restored at a lower parallelism, subtask k commits
// the committables of the old subtasks j with j mod parallelism == k (the
// runtime hands them over) and deletes those subtasks' leftovers too, so
// that no hidden part file of a subtask that no longer runs stays behind.
func TestPartSinkScaleDown(t *testing.T) {
	dir := t.TempDir()
	cfg := loadSink(t, "path: "+filepath.Join(dir, "out.jsonl"))
	ctx := context.Background()
	var cs [3][]byte
	for k := range 3 {
		s := openParts(t, cfg, k, 3, nil)
		require.NoError(t, s.Write(ctx, recs(10*k, 10*k+2)))
		c, err := s.PreCommit(ctx, 1)
		require.NoError(t, err)
		cs[k] = c
		require.NoError(t, s.Write(ctx, recs(10*k+2, 10*k+3)))
		require.NoError(t, s.parts.w.Flush())
		crash(s)
	}

	s0 := openParts(t, cfg, 0, 2, [][]byte{cs[0], cs[2]})
	visible, hidden := listDir(t, dir)
	require.Equal(t, []string{"out-0-000000.jsonl", "out-2-000000.jsonl"}, visible)
	require.Equal(t, []string{".out-1-000000.jsonl.pending", ".out-1-000001.jsonl.inprogress"}, hidden,
		"subtask 0 of 2 cleans up after old subtask 2 and leaves subtask 1's files alone")
	require.Equal(t, lines(20, 22), readFile(t, filepath.Join(dir, "out-2-000000.jsonl")))

	s1 := openParts(t, cfg, 1, 2, [][]byte{cs[1]})
	visible, hidden = listDir(t, dir)
	require.Equal(t, []string{"out-0-000000.jsonl", "out-1-000000.jsonl", "out-2-000000.jsonl"}, visible)
	require.Empty(t, hidden)
	require.NoError(t, s0.Close(ctx))
	require.NoError(t, s1.Close(ctx))
}

func TestPartSinkContinuesSequence(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"part-0-000007.jsonl", "part-1-000009.jsonl", "part-0-x.jsonl", "other.jsonl"} {
		writeFile(t, filepath.Join(dir, name), "old\n")
	}
	ctx := context.Background()
	s := openParts(t, loadSink(t, "path: "+dir), 0, 1, nil)
	require.NoError(t, s.Write(ctx, recs(0, 1)))
	c1, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"part-0-000008.jsonl"}, finals(decode(t, c1)), "after the highest part of this subtask")
	require.NoError(t, s.Commit(ctx, [][]byte{c1}))
	require.Equal(t, lines(0, 1), readFile(t, filepath.Join(dir, "part-0-000008.jsonl")))
	require.Equal(t, "old\n", readFile(t, filepath.Join(dir, "part-0-000007.jsonl")), "earlier runs' parts are kept")

	// Another writer of the same names is detected, not overwritten.
	writeFile(t, filepath.Join(dir, "part-0-000009.jsonl"), "theirs\n")
	err = s.Write(ctx, recs(1, 2))
	require.ErrorContains(t, err, "part-0-000009.jsonl already exists: another sink writes part files with the same path")
	require.Equal(t, "theirs\n", readFile(t, filepath.Join(dir, "part-0-000009.jsonl")))
}

func TestPartSinkCloseAborts(t *testing.T) {
	dir := t.TempDir()
	cfg := loadSink(t, "path: "+dir+"/")
	ctx := context.Background()
	s := openParts(t, cfg, 0, 1, nil)
	require.NoError(t, s.Write(ctx, recs(0, 2)))
	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx))
	visible, hidden := listDir(t, dir)
	require.Empty(t, visible, "Close makes nothing visible")
	require.Equal(t, []string{".part-0-000000.jsonl.inprogress"}, hidden)

	s = openParts(t, cfg, 0, 1, nil)
	visible, hidden = listDir(t, dir)
	require.Empty(t, visible)
	require.Empty(t, hidden, "the next start aborts it")
	require.NoError(t, s.Close(ctx))
}

// Without checkpoints the sink is the plain writer; PreCommit and Commit
// still work (the runtime does not call them).
func TestSinkPlainTwoPhase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	s := conntest.OpenSink(t, loadSink(t, "path: "+path), 0, 1).(*sink)
	ctx := context.Background()
	require.NoError(t, s.Write(ctx, recs(0, 1)))
	c, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, decode(t, c).Files)
	require.Equal(t, lines(0, 1), readFile(t, path), "PreCommit flushes")
	require.NoError(t, s.Commit(ctx, [][]byte{c}))
	require.NoError(t, s.Close(ctx))
}

func TestPartLayout(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		path   string
		format codec.Format
		want   partLayout
		final  string
	}{
		{"out/result.jsonl", codec.JSON, partLayout{"out", "result", ".jsonl"}, "result-3-000012.jsonl"},
		{"out/result.csv", codec.CSV, partLayout{"out", "result", ".csv"}, "result-3-000012.csv"},
		{"out/x.tar.gz", codec.JSON, partLayout{"out", "x.tar", ".gz"}, "x.tar-3-000012.gz"},
		{"out/x", codec.JSON, partLayout{"out", "x", ""}, "x-3-000012"},
		{"result.jsonl", codec.JSON, partLayout{".", "result", ".jsonl"}, "result-3-000012.jsonl"},
		{"out/", codec.JSON, partLayout{"out", "part", ".jsonl"}, "part-3-000012.jsonl"},
		{"out/", codec.CSV, partLayout{"out", "part", ".csv"}, "part-3-000012.csv"},
		{dir, codec.JSON, partLayout{dir, "part", ".jsonl"}, "part-3-000012.jsonl"},
	}
	for _, tt := range tests {
		l := partLayoutOf(tt.path, tt.format)
		require.Equal(t, tt.want, l, tt.path)
		require.Equal(t, tt.final, l.final(3, 12))
		for name, kind := range map[string]partKind{
			tt.final: partFinal, inProgressName(tt.final): partInProgress, pendingName(tt.final): partPending,
		} {
			sub, seq, k, ok := l.parse(name)
			require.True(t, ok, name)
			require.Equal(t, 3, sub, name)
			require.Equal(t, int64(12), seq)
			require.Equal(t, kind, k, name)
		}
	}
	l := partLayout{"out", "out", ".jsonl"}
	require.Equal(t, "out-1-1234567.jsonl", l.final(1, 1234567))
	for _, name := range []string{
		"out-1-0-000001.jsonl", "out-1-.jsonl", "out-1-00a1.jsonl", "out--000001.jsonl", "out-a-000001.jsonl",
		"out-1-000001.csv", ".out-1-000001.jsonl", "out-1-000001.jsonl.pending", "x-1-000001.jsonl",
	} {
		_, _, _, ok := l.parse(name)
		require.False(t, ok, name)
	}
}

// faultFS injects errors into the operations for which fail returns one.
// A failing write is torn: half of the bytes reach the file.
type faultFS struct {
	osFS
	fail func(op, name string) error
}

var errInjected = errors.New("injected fault")

// failOn fails op on every name containing match.
func failOn(op, match string) func(string, string) error {
	return func(o, name string) error {
		if o == op && strings.Contains(name, match) {
			return fmt.Errorf("%s %s: %w", op, filepath.Base(name), errInjected)
		}
		return nil
	}
}

func (f *faultFS) inject(op, name string) error {
	if f.fail == nil {
		return nil
	}
	return f.fail(op, name)
}

func (f *faultFS) Create(name string) (fsFile, error) {
	if err := f.inject("create", name); err != nil {
		return nil, err
	}
	file, err := f.osFS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{fsFile: file, fs: f, name: name}, nil
}

func (f *faultFS) Rename(from, to string) error {
	if err := f.inject("rename", from); err != nil {
		return err
	}
	return f.osFS.Rename(from, to)
}

func (f *faultFS) Remove(name string) error {
	if err := f.inject("remove", name); err != nil {
		return err
	}
	return f.osFS.Remove(name)
}

func (f *faultFS) SyncDir(dir string) error {
	if err := f.inject("syncdir", dir); err != nil {
		return err
	}
	return f.osFS.SyncDir(dir)
}

type faultFile struct {
	fsFile
	fs   *faultFS
	name string
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.inject("write", f.name); err != nil {
		n, _ := f.fsFile.Write(p[:len(p)/2])
		return n, err
	}
	return f.fsFile.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.inject("sync", f.name); err != nil {
		return err
	}
	return f.fsFile.Sync()
}

func (f *faultFile) Close() error {
	err := f.fsFile.Close()
	if ierr := f.fs.inject("close", f.name); ierr != nil {
		return ierr
	}
	return err
}

// Faults at the seam surface from PreCommit or Commit, never make a file
// visible that is partial or not covered by a completed checkpoint, and a
// restart from the last completed checkpoint delivers every record once.
func TestPartSinkFaults(t *testing.T) {
	tests := []struct {
		name     string
		at       string // precommit or commit
		fail     func(op, name string) error
		wantErr  string
		finalsOK []string // parts visible after the fault (complete)
	}{
		{"torn write", "precommit", failOn("write", "000001"), "write ", nil},
		{"fsync part", "precommit", failOn("sync", "000001"), "fsync ", nil},
		{"close part", "precommit", failOn("close", "000001"), "close ", nil},
		{"rename to pending", "precommit", failOn("rename", ".part-0-000001.jsonl.inprogress"), "pre-commit ", nil},
		{"fsync directory at pre-commit", "precommit", failOn("syncdir", ""), "fsync directory", nil},
		{"rename to final", "commit", failOn("rename", "000001.jsonl.pending"), "commit checkpoint 1: ", []string{"part-0-000000.jsonl"}},
		{"fsync directory at commit", "commit", failOn("syncdir", ""), "commit: fsync directory",
			[]string{"part-0-000000.jsonl", "part-0-000001.jsonl"}},
	}
	complete := map[string]string{"part-0-000000.jsonl": lines(0, 2), "part-0-000001.jsonl": lines(2, 4)}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := loadSink(t, "path: "+dir+"/\nroll_size: 16") // two records per part
			ctx := context.Background()
			ffs := &faultFS{}
			s := openParts(t, cfg, 0, 1, nil, withFS(ffs))
			require.NoError(t, s.Write(ctx, recs(0, 4)))

			var restored [][]byte
			if tt.at == "precommit" {
				ffs.fail = tt.fail
				_, err := s.PreCommit(ctx, 1)
				require.ErrorIs(t, err, errInjected)
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, err, `file sink "out": `)
				ffs.fail = nil
				require.ErrorContains(t, s.Write(ctx, recs(4, 5)), "failed earlier", "the sink stays failed")
				_, err = s.PreCommit(ctx, 2)
				require.ErrorIs(t, err, errInjected)
			} else {
				c1, err := s.PreCommit(ctx, 1)
				require.NoError(t, err)
				ffs.fail = tt.fail
				err = s.Commit(ctx, [][]byte{c1})
				require.ErrorIs(t, err, errInjected)
				require.ErrorContains(t, err, tt.wantErr)
				ffs.fail = nil
				restored = [][]byte{c1}
			}
			visible, _ := listDir(t, dir)
			require.Equal(t, tt.finalsOK, visible)
			for _, name := range visible {
				require.Equal(t, complete[name], readFile(t, filepath.Join(dir, name)), "visible means complete")
			}
			crash(s)

			// Restart from the last completed checkpoint; the source replays.
			s = openParts(t, cfg, 0, 1, restored, withFS(ffs))
			_, hidden := listDir(t, dir)
			require.Empty(t, hidden, "restore commits or aborts every leftover")
			replayFrom := 0
			if restored != nil {
				replayFrom = 4
			}
			require.NoError(t, s.Write(ctx, recs(replayFrom, 5)))
			c, err := s.PreCommit(ctx, 2)
			require.NoError(t, err)
			require.NoError(t, s.Commit(ctx, [][]byte{c}))
			require.NoError(t, s.Close(ctx))
			require.Equal(t, lines(0, 5), output(t, dir), "every record exactly once")
		})
	}
}

func TestPartSinkFaultsAtRestore(t *testing.T) {
	dir := t.TempDir()
	cfg := loadSink(t, "path: "+dir+"/")
	ctx := context.Background()
	s := openParts(t, cfg, 0, 1, nil)
	require.NoError(t, s.Write(ctx, recs(0, 1)))
	c1, err := s.PreCommit(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s.Write(ctx, recs(1, 2)))
	crash(s)

	for _, fail := range []func(string, string) error{failOn("rename", "pending"), failOn("remove", "inprogress")} {
		err := newParts(t, cfg, withFS(&faultFS{fail: fail})).Open(ctx, partsContext(0, 1, [][]byte{c1}))
		require.ErrorIs(t, err, errInjected)
	}
	s = openParts(t, cfg, 0, 1, [][]byte{c1})
	visible, hidden := listDir(t, dir)
	require.Equal(t, []string{"part-0-000000.jsonl"}, visible)
	require.Empty(t, hidden)
	require.NoError(t, s.Close(ctx))
}

func TestCommittableJSON(t *testing.T) {
	c := committable{V: 1, Checkpoint: 7, Subtask: 2, Dir: "out", Files: []partEntry{
		{Pending: ".result-2-000003.jsonl.pending", Final: "result-2-000003.jsonl", Size: 42},
	}}
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.Equal(t, `{"v":1,"checkpoint":7,"subtask":2,"dir":"out","files":[`+
		`{"pending":".result-2-000003.jsonl.pending","final":"result-2-000003.jsonl","size":42}]}`, string(b))
	require.Equal(t, c, decode(t, b))
	require.True(t, slices.Equal([]string{"result-2-000003.jsonl"}, finals(c)))
}

// A full disk is reported with the file's path once, however the sink
// writes: os's errors name the path already.
func TestSinkDiskFullNamesPathOnce(t *testing.T) {
	ctx := context.Background()
	t.Run("without checkpoints", func(t *testing.T) {
		if _, err := os.Stat("/dev/full"); err != nil {
			t.Skip("no /dev/full here")
		}
		s := conntest.OpenSink(t, loadSink(t, "path: /dev/full"), 0, 1)
		require.NoError(t, s.Write(ctx, recs(0, 1)), "buffered")
		require.EqualError(t, s.Close(ctx), `file sink "out": write /dev/full: no space left on device`)
	})
	t.Run("part files", func(t *testing.T) {
		dir := t.TempDir()
		full := func(op, name string) error {
			if op == "write" {
				return &fs.PathError{Op: "write", Path: name, Err: syscall.ENOSPC}
			}
			return nil
		}
		s := openParts(t, loadSink(t, "path: "+dir+"/"), 0, 1, nil, withFS(&faultFS{fail: full}))
		require.NoError(t, s.Write(ctx, recs(0, 1)), "buffered")
		_, err := s.PreCommit(ctx, 1)
		path := filepath.Join(dir, ".part-0-000000.jsonl.inprogress")
		require.EqualError(t, err, `file sink "out": write `+path+`: no space left on device`)
		require.ErrorIs(t, err, syscall.ENOSPC)
		crash(s)
	})
}
