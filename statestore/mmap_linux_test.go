package statestore

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// transaction, and a snapshot of the bbolt backend is one while it is
// encoded: both files map mmapReserve up front, so that growing files are
// not mapped again while checkpoints run.
func TestFilesMapTheReserve(t *testing.T) {
	if mmapReserve < 16<<30 {
		t.Fatalf("mmapReserve is %d bytes; the live file of a few GiB of state outgrows it during a snapshot", mmapReserve)
	}
	dir := t.TempDir()
	b, err := NewBolt(BoltOptions{Options: Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := mappedBytes(t, filepath.Join(dir, BoltFileName)); got != int64(mmapReserve) {
		t.Errorf("live state file: %d bytes mapped, want %d", got, mmapReserve)
	}

	s, err := OpenCheckpointStore(dir, CheckpointStoreOptions{Retain: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if got := mappedBytes(t, filepath.Join(dir, CheckpointFileName)); got != int64(mmapReserve) {
		t.Errorf("checkpoint store: %d bytes mapped, want %d", got, mmapReserve)
	}
}
