package file

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// progress returns src's Progress.
func progress(t *testing.T, src pipeline.Source) [2]int64 {
	t.Helper()
	p, ok := src.(pipeline.Progresser)
	require.True(t, ok, "the file source reports its progress")
	done, total := p.Progress()
	return [2]int64{done, total}
}

// TestSourceProgress: the bytes read of the subtask's files, of their
// size; a restore counts what its position says was read; with follow the
// total is unknown.
func TestSourceProgress(t *testing.T) {
	dir := t.TempDir()
	a := manyLines(0, 3000) // more than a batch of lines
	b := manyLines(3000, 10)
	writeFile(t, filepath.Join(dir, "a.jsonl"), a)
	writeFile(t, filepath.Join(dir, "b.jsonl"), b)
	size := int64(len(a) + len(b))
	cfg := loadSource(t, "path: "+dir)

	src, err := cfg.NewSource()
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, progress(t, src), "before Open")

	src = conntest.OpenSource(t, cfg, 0, 1, nil)
	require.Equal(t, [2]int64{0, size}, progress(t, src))
	first := conntest.ReadOnce(t, src, time.Second)
	require.NoError(t, first.Err)
	got := progress(t, src)
	require.Positive(t, got[0])
	require.Less(t, got[0], int64(len(a)), "a batch of a.jsonl")
	conntest.Drain(t, src, 10*time.Second)
	require.Equal(t, [2]int64{size, size}, progress(t, src))

	restored := conntest.OpenSource(t, cfg, 0, 1, first.Position)
	require.Equal(t, got, progress(t, restored), "restored where the first batch ended")

	followed := conntest.OpenSource(t, loadSource(t, "path: "+dir+"\nfollow: true"), 0, 1, nil)
	require.Equal(t, int64(0), progress(t, followed)[1], "follow: no total")
}
