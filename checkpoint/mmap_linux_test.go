package checkpoint

import (
	"bufio"
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// mappedBytes returns the size of the process's mappings of path, from
// /proc/self/maps.
func mappedBytes(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path {
			continue
		}
		start, end, _ := strings.Cut(fields[0], "-")
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("mapping %q: %v %v", sc.Text(), err1, err2)
		}
		total += int64(e - s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

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
	if got := mappedBytes(t, filepath.Join(dir, FileName)); got < reserve {
		t.Errorf("checkpoint store: %d bytes mapped, want at least %d", got, reserve)
	}
}
