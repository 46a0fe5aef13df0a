package statestore

import (
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// A write that grows a bbolt file past its mapping waits for every read
// transaction, and a snapshot of the bbolt backend is one while it is
// encoded: both files map mmapReserve up front, so that growing files are
// not mapped again while checkpoints run.
func TestFilesMapTheReserve(t *testing.T) {
	if mmapReserve < 16<<30 {
		t.Fatalf("mmapReserve is %d bytes; the live file of a few GiB of state outgrows it during a snapshot", mmapReserve)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur != math.MaxUint64 && lim.Cur < vmSize(t)+2*uint64(mmapReserve) {
		// The files then map less: TestOpenWithLimitedAddressSpace.
		t.Skipf("the address space is limited to %d bytes (ulimit -v), below two reserves", lim.Cur)
	}
	dir := t.TempDir()
	b, err := NewBolt(BoltOptions{Options: Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := testkit.MappedBytes(t, filepath.Join(dir, BoltFileName)); got != int64(mmapReserve) {
		t.Errorf("live state file: %d bytes mapped, want %d", got, mmapReserve)
	}
}

// vmSize returns the process's address space in bytes (VmSize).
func vmSize(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmSize:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmSize in /proc/self/status")
	return 0
}

// Where the address space is limited below the reserve (ulimit -v), both
// files open anyway, mapping less (OpenMapped), and work.
func TestOpenWithLimitedAddressSpace(t *testing.T) {
	if os.Getenv("EDDY_TEST_LIMITED_AS") == "" {
		// The limit applies to the whole process: set it in a child.
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenWithLimitedAddressSpace$", "-test.v")
		cmd.Env = append(os.Environ(), "EDDY_TEST_LIMITED_AS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestOpenWithLimitedAddressSpace") {
			t.Fatalf("child did not pass:\n%s", out)
		}
		return
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &old); err != nil {
		t.Fatal(err)
	}
	limit := min(vmSize(t)+4<<30, old.Max) // far below mmapReserve
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b, err := NewBolt(BoltOptions{Options: Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := testkit.MappedBytes(t, filepath.Join(dir, BoltFileName)); got == 0 || got >= int64(mmapReserve) {
		t.Errorf("live state file: %d bytes mapped, want some, below %d", got, mmapReserve)
	}
	v, err := RegisterValue(b, ValueDescriptor[string]{Name: "v"})
	if err != nil {
		t.Fatal(err)
	}
	v.Put("k", "", "value")
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	n, err := snap.WriteTo(io.Discard)
	snap.Release()
	if err != nil || n == 0 {
		t.Fatalf("snapshot: %d bytes, %v", n, err)
	}
}
