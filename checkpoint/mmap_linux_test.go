package checkpoint

import (
	"context"
	"math"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// A write that grows a bbolt file past its mapping waits for every read
// transaction: the store maps a large reserve up front
// (statestore.OpenMapped), so that a growing store is not mapped again
// while checkpoints are read.
func TestStoreMapsTheReserve(t *testing.T) {
	const reserve = 16 << 30
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != math.MaxUint64 && lim.Cur < 2*reserve {
		t.Skipf("the address space is limited to %d bytes (ulimit -v)", lim.Cur)
	}
	dir := t.TempDir()
	s, err := Open(dir, Options{Retain: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got := testkit.MappedBytes(t, filepath.Join(dir, FileName)); got < reserve {
		t.Errorf("checkpoint store: %d bytes mapped, want at least %d", got, reserve)
	}
}
