package testkit

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// MappedBytes returns the size of the process's mappings of path, from
// /proc/self/maps.
func MappedBytes(t testing.TB, path string) int64 {
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
