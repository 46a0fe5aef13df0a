package checkpoint

import (
	"bytes"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

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
