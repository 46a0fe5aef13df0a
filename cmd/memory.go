package cmd

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// A stream processor's live heap is small and steady (bounded channels,
// batches recycled), so Go's default GOGC=100 collects far too often: eddy
// runs with a higher GC percent unless GOGC is set, and caps the heap below
// the container's memory limit unless GOMEMLIMIT is set, so that large keyed
// state makes the collector work harder instead of the process being killed.
const (
	keyGCPercent     = "gc-percent"
	defaultGCPercent = 400
	// cgroupMemoryMax is the cgroup v2 memory limit of the process.
	cgroupMemoryMax = "/sys/fs/cgroup/memory.max"
)

// tuneMemory applies the GC settings of a run and logs them.
func tuneMemory(logger *slog.Logger, gcPercent int) {
	if _, set := os.LookupEnv("GOGC"); !set && gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
		logger.Debug("GC percent set", "gc_percent", gcPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if limit, ok := containerMemoryLimit(); ok {
			debug.SetMemoryLimit(limit / 10 * 9)
			logger.Debug("memory limit set below the container's", "bytes", limit/10*9)
		}
	}
}

// containerMemoryLimit reads the cgroup v2 memory limit, if there is one.
func containerMemoryLimit() (int64, bool) {
	b, err := os.ReadFile(cgroupMemoryMax)
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
