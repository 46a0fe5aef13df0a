package generator

import (
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
	require.True(t, ok, "the generator reports its progress")
	done, total := p.Progress()
	return [2]int64{done, total}
}

// TestProgress: a generator with count reports the counters of its
// subtask it passed, of all it has; a restored one starts where its
// position is; without count the total is unknown.
func TestProgress(t *testing.T) {
	cfg := load(t, "count: 2500\nfields:\n  i: i\n")
	src, err := cfg.NewSource()
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, progress(t, src), "before Open")

	src = conntest.OpenSource(t, cfg, 1, 2, nil) // counters 1, 3, ..., 2499: 1250
	require.Equal(t, [2]int64{0, 1250}, progress(t, src))
	first := conntest.ReadOnce(t, src, time.Second)
	require.NoError(t, first.Err)
	require.Equal(t, [2]int64{int64(len(first.Records)), 1250}, progress(t, src))
	conntest.Drain(t, src, 10*time.Second)
	require.Equal(t, [2]int64{1250, 1250}, progress(t, src))

	restored := conntest.OpenSource(t, cfg, 1, 2, first.Position)
	require.Equal(t, [2]int64{int64(len(first.Records)), 1250}, progress(t, restored))

	unbounded := conntest.OpenSource(t, load(t, "fields:\n  i: i\n"), 0, 1, nil)
	conntest.ReadOnce(t, unbounded, time.Second)
	require.Equal(t, int64(0), progress(t, unbounded)[1], "no count: no total")
}
