//go:build unix

package nexmark

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

// peakRSS returns the process's peak resident set size in bytes, or 0
// where it cannot be read. On Linux it is VmHWM of /proc/self/status: the
// high-water mark of this program's memory. getrusage's maxrss is not: it
// keeps what the process had before its execve, so a child spawned by a
// large parent (Go's exec shares the parent's memory until the execve)
// reports the parent's peak.
func peakRSS() int64 {
	if runtime.GOOS == "linux" {
		if n, ok := vmHWM(); ok {
			return n
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" || runtime.GOOS == "ios" {
		return int64(ru.Maxrss) // bytes there
	}
	return int64(ru.Maxrss) << 10 // KiB elsewhere
}

// vmHWM reads VmHWM (kB) from /proc/self/status.
func vmHWM() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
		return kb << 10, err == nil
	}
	return 0, false
}
