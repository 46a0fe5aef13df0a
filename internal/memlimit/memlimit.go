package memlimit

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// A stream processor's live heap is small and steady (bounded channels,
// batches recycled), so Go's default GOGC=100 collects far too often: eddy
// runs with a higher GC percent unless GOGC is set. Keyed state in the
// memory backend is the exception: with 1 GiB of state the live heap is a
// few GiB, and GC percent 400 lets the heap grow to five times that before
// collecting. So, unless GOMEMLIMIT is set, eddy also caps the heap softly
// below the container's memory limit and below the machine's memory: near
// the cap the collector works harder instead of the process being killed
// or the machine swapping.
const (
	// DefaultGCPercent is the GC percent of `eddy run` (unless GOGC or
	// --gc-percent say otherwise).
	DefaultGCPercent = 400
	// cgroupMemoryMax is the cgroup v2 memory limit of the process.
	cgroupMemoryMax = "/sys/fs/cgroup/memory.max"
	// procMeminfo tells the machine's memory (Linux).
	procMeminfo = "/proc/meminfo"
)

// Apply sets the GC percent to gcPercent unless GOGC is set (or gcPercent
// is not positive), and the soft memory limit to Default unless GOMEMLIMIT
// is set, and logs what it set at debug level. Call it once, before the
// pipeline starts.
func Apply(logger *slog.Logger, gcPercent int) {
	if _, set := os.LookupEnv("GOGC"); !set && gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
		logger.Debug("GC percent set", "gc_percent", gcPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if limit, ok := Default(); ok {
			debug.SetMemoryLimit(limit)
			logger.Debug("soft memory limit set", "bytes", limit)
		}
	}
}

// Default is eddy's soft limit of the Go heap: 90% of the container's
// memory limit (cgroup v2) and at most 75% of the machine's memory, leaving
// the rest to the page cache (checkpoint and state files) and to other
// processes. False where neither is known.
func Default() (int64, bool) {
	c, okC := readCgroupLimit(cgroupMemoryMax)
	m, okM := readMemTotal(procMeminfo)
	return limit(c, okC, m, okM)
}

// limit is Default's rule for a container limit and a machine's memory,
// each where known.
func limit(container int64, okC bool, machine int64, okM bool) (int64, bool) {
	l, ok := int64(math.MaxInt64), false
	if okC {
		l, ok = container/10*9, true
	}
	if okM {
		l, ok = min(l, machine/4*3), true
	}
	if !ok {
		return 0, false
	}
	return l, true
}

// readCgroupLimit reads a cgroup v2 memory limit ("max": none).
func readCgroupLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0
}

// readMemTotal reads MemTotal from a /proc/meminfo ("MemTotal: 24567 kB").
func readMemTotal(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		return n << 10, err == nil && n > 0
	}
	return 0, false
}
