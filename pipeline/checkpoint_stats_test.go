package pipeline

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A checkpoint's record keeps the longest alignment of the tasks that
// acknowledged it.
func TestCheckpointAlignmentIsTheLongest(t *testing.T) {
	m := NewMetrics()
	m.checkpointTriggered(7, kindCheckpoint, false, time.Now(), 3)
	for _, d := range []time.Duration{3 * time.Millisecond, 40 * time.Millisecond, 0} {
		m.checkpointAcked(7, d)
	}
	stats := m.CheckpointStats()
	require.Len(t, stats.InProgress, 1)
	require.Equal(t, int64(40), stats.InProgress[0].AlignmentMS)
	require.Equal(t, 3, stats.InProgress[0].Acknowledged)
}
