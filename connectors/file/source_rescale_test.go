package file

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// rescaleFiles writes files whose lines name their file and number: some
// span several batches, one is empty.
func rescaleFiles(t *testing.T, dir string) (cfg *SourceConfig, all []string) {
	t.Helper()
	for f, n := range []int{3, batchLines*2 + 5, 0, 7, batchLines + 1, 2, 40} {
		var sb strings.Builder
		for i := range n {
			line := fmt.Sprintf("f%d-%d", f, i)
			fmt.Fprintf(&sb, "{\"l\":%q}\n", line)
			all = append(all, line)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("in-%02d.jsonl", f)), sb.String())
	}
	return loadSource(t, "path: "+filepath.Join(dir, "*.jsonl")), all
}

// openAt opens subtask k of p from the positions of every subtask of a
// checkpoint taken at another parallelism, as the runtime does, and
// returns the position its Open set.
func openAt(t *testing.T, cfg *SourceConfig, k, p int, all [][]byte) (pipeline.Source, []byte) {
	t.Helper()
	src, err := cfg.NewSource()
	require.NoError(t, err)
	sc := &pipeline.SourceContext{SubtaskInfo: conntest.Info("src", k, p), RestoredAll: all}
	require.NoError(t, src.Open(context.Background(), sc))
	t.Cleanup(func() { _ = src.Close(context.Background()) })
	return src, sc.Position
}

// readBatches reads up to n batches (n < 0: to the end) and returns the
// lines and the position after the last one (start when none was read).
func readBatches(t *testing.T, src pipeline.Source, n int, start []byte) ([]string, []byte) {
	t.Helper()
	var lines []string
	pos := start
	for i := 0; n < 0 || i < n; i++ {
		b := conntest.ReadOnce(t, src, 5*time.Second)
		if errors.Is(b.Err, io.EOF) {
			break
		}
		require.NoError(t, b.Err)
		for _, f := range conntest.Fields([]conntest.Batch{b}) {
			lines = append(lines, f["l"].(string))
		}
		pos = b.Position
	}
	return lines, pos
}

// A checkpoint's positions taken at one parallelism restore at another:
// every line is read exactly once over both runs, also when the restored
// run is checkpointed (mid-way, or right after Open) and rescaled again.
func TestSourceRescale(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, ps := range [][]int{{2, 3}, {3, 1}, {1, 4}, {4, 2, 3}, {3, 2, 1}, {2, 5, 2}} {
		t.Run(fmt.Sprint(ps), func(t *testing.T) {
			cfg, want := rescaleFiles(t, t.TempDir())
			var got []string
			// positions of the last run, by subtask: nil for one that read
			// nothing, as the runtime hands them over.
			var positions [][]byte
			for run, p := range ps {
				last := run == len(ps)-1
				var next [][]byte
				for k := range p {
					var src pipeline.Source
					var start []byte
					if run == 0 {
						src = conntest.OpenSource(t, cfg, k, p, nil)
					} else {
						src, start = openAt(t, cfg, k, p, positions)
						require.NotNil(t, start, "Open sets the restored position")
					}
					n := -1
					if !last {
						n = rng.IntN(4) // 0: checkpointed before its first Read
					}
					lines, pos := readBatches(t, src, n, start)
					got = append(got, lines...)
					next = append(next, pos)
				}
				positions = next
			}
			slices.Sort(got)
			slices.Sort(want)
			require.Equal(t, want, got, "every line exactly once")
		})
	}
}

// Follow: every file's offset moves to the subtask that reads it now.
func TestSourceRescaleFollow(t *testing.T) {
	dir := t.TempDir()
	for f := range 4 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("%d.log", f)), fmt.Sprintf("{\"l\":\"f%d-0\"}\n", f))
	}
	cfg := loadSource(t, "path: "+filepath.Join(dir, "*.log")+"\nfollow: true\npoll_interval: 5ms")
	var got []string
	var positions [][]byte
	for k := range 2 {
		lines, pos := readUntil(t, conntest.OpenSource(t, cfg, k, 2, nil), 2, 5*time.Second)
		for _, l := range lines {
			got = append(got, l["l"].(string))
		}
		positions = append(positions, pos)
	}
	for f := range 4 {
		appendTo(t, filepath.Join(dir, fmt.Sprintf("%d.log", f)), fmt.Sprintf("{\"l\":\"f%d-1\"}\n", f))
	}
	for k := range 3 {
		src, _ := openAt(t, cfg, k, 3, positions)
		n := map[int]int{0: 2, 1: 1, 2: 1}[k] // files k and k+3
		lines, _ := readUntil(t, src, n, 5*time.Second)
		for _, l := range lines {
			got = append(got, l["l"].(string))
		}
	}
	slices.Sort(got)
	require.Equal(t, []string{"f0-0", "f0-1", "f1-0", "f1-1", "f2-0", "f2-1", "f3-0", "f3-1"}, got)

	// A followed file that is gone (rotated away) is no reason to fail,
	// nor is a version-1 position: followed files are matched by name.
	require.NoError(t, os.Remove(filepath.Join(dir, "3.log")))
	name0 := filepath.Join(dir, "0.log")
	first := len(`{"l":"f0-0"}` + "\n")
	v1 := append([]byte{1, 1, byte(first), 2, byte(len(name0))}, name0...)
	gone := EncodePosition(Position{Subtask: 1, Parallelism: 2, Entries: []PositionEntry{{Name: filepath.Join(dir, "3.log"), Offset: 5, Line: 2}}})
	src, _ := openAt(t, cfg, 0, 2, [][]byte{v1, gone}) // files 0.log and 2.log
	lines, _ := readUntil(t, src, 3, 5*time.Second)
	require.ElementsMatch(t, []map[string]any{{"l": "f0-1"}, {"l": "f2-0"}, {"l": "f2-1"}}, lines)
}

// A rescaled restore refuses what it cannot map: positions of an older
// eddy, files gone or shifted, positions that do not belong together.
func TestSourceRescaleErrors(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := rescaleFiles(t, dir)
	names, err := expand(cfg.Path)
	require.NoError(t, err)
	pos := func(sub, p int, name string) []byte {
		return EncodePosition(Position{Subtask: sub, Parallelism: p, Entries: []PositionEntry{{Name: name, Offset: 1, Line: 2}}})
	}
	for _, tc := range []struct {
		all  [][]byte
		want string
	}{
		{[][]byte{{1, 1, 5, 2, 1, 'x'}}, "older eddy"},
		{[][]byte{pos(0, 2, filepath.Join(dir, "gone.jsonl"))}, "is gone"},
		{[][]byte{pos(1, 2, names[2])}, "was read by subtask 1 of 2, but is file 2 now"},
		{[][]byte{pos(0, 2, names[0]), pos(0, 2, names[2])}, "do not belong together"},
		{[][]byte{pos(0, 2, names[0]), pos(1, 3, names[1])}, "do not belong together"},
	} {
		src, err := cfg.NewSource()
		require.NoError(t, err)
		err = src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("src", 0, 3), RestoredAll: tc.all})
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, err, `file source "src": restore at parallelism 3`)
	}
}
