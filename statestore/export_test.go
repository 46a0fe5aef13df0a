package statestore

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// DisableTimerCache makes m's timer services, created after it, encode
// every snapshot's timers anew (tests compare the cache with it).
func DisableTimerCache(m *Memory) { m.noTimerCache = true }

// snapshotBytes takes a snapshot of b, writes it and releases it.
func snapshotBytes(t testing.TB, b Backend) []byte {
	t.Helper()
	snap, err := b.Snapshot()
	require.NoError(t, err)
	defer snap.Release()
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	return buf.Bytes()
}

// SetMaxTableChanges sets how many changes a table of an incremental bbolt
// backend records between two checkpoints, until the test ends.
func SetMaxTableChanges(t testing.TB, n int) {
	old := maxTableChanges
	maxTableChanges = n
	t.Cleanup(func() { maxTableChanges = old })
}
