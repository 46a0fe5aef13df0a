package statestore

import (
	"bytes"
	"fmt"
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

// ChainParts returns the parts of an incremental chain of n checkpoints
// (ids 1..n) of a bbolt backend: a full part, then n-1 delta parts, each
// written after some keys were written, some deleted and some timers
// changed; and the full snapshot of the state at the last checkpoint,
// which MergeChain(parts) must equal.
func ChainParts(t testing.TB, n int) (parts [][]byte, want []byte) {
	t.Helper()
	kg := func(key string) int { return int(key[len(key)-1]) % 8 }
	b, err := NewBolt(BoltOptions{Options: Options{KeyGroup: kg, KeyGroups: [2]int{0, 8}, Incremental: true}, Dir: t.TempDir()})
	require.NoError(t, err)
	defer b.Close()
	val, err := RegisterValue(b, ValueDescriptor[int64]{Name: "val"})
	require.NoError(t, err)
	tm := b.TimerService("timers")
	for i := range 200 {
		val.Put(fmt.Sprintf("key%d", i), "", int64(i))
		if i%10 == 0 {
			tm.RegisterEventTimer(fmt.Sprintf("key%d", i), "", int64(i))
		}
	}
	for id := int64(1); id <= int64(n); id++ {
		if id > 1 {
			for i := 0; i < 200; i += 20 {
				val.Put(fmt.Sprintf("key%d", i), "", id*1000+int64(i)) // changed
				val.Put(fmt.Sprintf("new%d-%d", id, i), "ns", id)      // added
				val.Delete(fmt.Sprintf("key%d", i+int(id)), "")        // deleted
				tm.DeleteEventTimer(fmt.Sprintf("key%d", i), "", int64(i))
			}
		}
		snap, err := b.SnapshotCheckpoint(id)
		require.NoError(t, err)
		want = snapshotBytes(t, b)
		if id > 1 {
			require.Equal(t, id-1, snap.(DeltaSnapshot).Base(), "checkpoint %d", id)
		}
		var buf bytes.Buffer
		_, err = snap.WriteAndRelease(&buf)
		require.NoError(t, err)
		parts = append(parts, buf.Bytes())
		b.CheckpointCompleted(id)
	}
	return parts, want
}

// SetMaxTableChanges sets how many changes a table of an incremental bbolt
// backend records between two checkpoints, until the test ends.
func SetMaxTableChanges(t testing.TB, n int) {
	old := maxTableChanges
	maxTableChanges = n
	t.Cleanup(func() { maxTableChanges = old })
}
