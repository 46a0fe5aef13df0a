package checkpoint

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// ChainParts returns the parts of an incremental chain of n checkpoints
// (ids 1..n) of a bbolt backend: a full part, then n-1 delta parts, each
// written after some keys were written, some deleted and some timers
// changed; and the full snapshot of the state at the last checkpoint,
// which statestore.MergeChain(parts) must equal.
func ChainParts(t testing.TB, n int) (parts [][]byte, want []byte) {
	t.Helper()
	kg := func(key string) int { return int(key[len(key)-1]) % 8 }
	b, err := statestore.NewBolt(statestore.BoltOptions{Options: statestore.Options{KeyGroup: kg, KeyGroups: [2]int{0, 8}, Incremental: true}, Dir: t.TempDir()})
	require.NoError(t, err)
	defer b.Close()
	val, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "val"})
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
		full, err := b.Snapshot()
		require.NoError(t, err)
		var fb bytes.Buffer
		_, err = full.WriteAndRelease(&fb)
		require.NoError(t, err)
		want = fb.Bytes()
		if id > 1 {
			require.Equal(t, id-1, snap.(statestore.DeltaSnapshot).Base(), "checkpoint %d", id)
		}
		var buf bytes.Buffer
		_, err = snap.WriteAndRelease(&buf)
		require.NoError(t, err)
		parts = append(parts, buf.Bytes())
		b.CheckpointCompleted(id)
	}
	return parts, want
}

// LogBuffer collects slog output from any goroutine.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Logger returns a logger of every level that writes to l.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// ListIDs lists the store's completed and incomplete checkpoints, newest
// first.
func ListIDs(t testing.TB, s *Store) (complete, incomplete []int64) {
	t.Helper()
	infos, err := s.List()
	require.NoError(t, err)
	for _, ci := range infos {
		if ci.Complete {
			complete = append(complete, ci.ID)
		} else {
			incomplete = append(incomplete, ci.ID)
		}
	}
	return complete, incomplete
}

// SettleWriter returns once the store's writer has done what came before:
// the part-file removals it does after replying to a completion included.
// It submits a deletion of nothing, which the writer takes in turn.
func SettleWriter(t testing.TB, s *Store) {
	t.Helper()
	require.NoError(t, s.submit(&writeReq{op: wDelete, fault: OpRetain}))
}

// SetDirectIO turns direct I/O of part files on or off, for tests; it
// returns the previous setting.
func SetDirectIO(on bool) bool {
	old := useDirectIO
	useDirectIO = on && directIOFlag != 0
	return old
}

// RefuseDirectWrites makes writes with direct I/O fail with EINVAL, as on
// a file system that accepts O_DIRECT at open but not for writes, and
// counts them; it returns a function that undoes it.
func RefuseDirectWrites(refused *int) (undo func()) {
	old := writePartFile
	writePartFile = func(f *os.File, direct bool, b []byte) (int, error) {
		if direct {
			*refused++
			return 0, errInvalid
		}
		return old(f, direct, b)
	}
	return func() { writePartFile = old }
}
