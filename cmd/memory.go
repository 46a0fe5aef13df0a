package cmd

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/eddy-stream/eddy/connectors/file"
	"github.com/eddy-stream/eddy/internal/hugeheap"
	"github.com/eddy-stream/eddy/pipeline"
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
	keyGCPercent = "gc-percent"
	// DefaultGCPercent is the GC percent of `eddy run` (unless GOGC or
	// --gc-percent say otherwise).
	DefaultGCPercent = 400
	// cgroupMemoryMax is the cgroup v2 memory limit of the process.
	cgroupMemoryMax = "/sys/fs/cgroup/memory.max"
	// procMeminfo tells the machine's memory (Linux).
	procMeminfo = "/proc/meminfo"
)

// TuneMemory applies the GC settings of `eddy run` and logs them:
// gcPercent unless GOGC is set, and DefaultMemoryLimit unless GOMEMLIMIT
// is set; it also logs how freed memory goes back to the kernel
// (ReleaseMemoryLazily). Benchmarks that run pipelines in-process call it
// too, so that they measure what eddy does.
func TuneMemory(logger *slog.Logger, gcPercent int) {
	if _, set := os.LookupEnv("GOGC"); !set && gcPercent > 0 {
		debug.SetGCPercent(gcPercent)
		logger.Debug("GC percent set", "gc_percent", gcPercent)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if limit, ok := DefaultMemoryLimit(); ok {
			debug.SetMemoryLimit(limit)
			logger.Debug("soft memory limit set", "bytes", limit)
		}
	}
	if adv := ReleaseAdvice(); adv != "" {
		logger.Debug("freed memory goes back to the kernel", "madvise", adv)
	}
}

// DefaultMemoryLimit is eddy's soft limit of the Go heap: 90% of the
// container's memory limit (cgroup v2) and at most 75% of the machine's
// memory, leaving the rest to the page cache (checkpoint and state files)
// and to other processes. False where neither is known.
func DefaultMemoryLimit() (int64, bool) {
	c, okC := readCgroupLimit(cgroupMemoryMax)
	m, okM := readMemTotal(procMeminfo)
	return memoryLimit(c, okC, m, okM)
}

func memoryLimit(container int64, okC bool, machine int64, okM bool) (limit int64, ok bool) {
	limit = math.MaxInt64
	if okC {
		limit, ok = container/10*9, true
	}
	if okM {
		limit, ok = min(limit, machine/4*3), true
	}
	if !ok {
		return 0, false
	}
	return limit, true
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

// Values of --huge-pages, besides a size.
const (
	keyHugePages   = "huge-pages"
	hugePagesAuto  = "auto"
	hugePagesOn    = "on"
	hugePagesOff   = "off"
	hugePagesUsage = "back the Go heap with transparent huge pages where the system's THP mode is madvise: off, on, a size (e.g. 8GiB) to advise at most that much heap, or auto (on when keyed state lives on the heap: the memory backend)"
	// ReserveToLimit asks ReserveHugePages for as much heap as the soft
	// memory limit.
	ReserveToLimit = -1
)

// hugePagesReservation reads --huge-pages for a pipeline that keeps keyed
// state on the heap or not: how much heap to advise, 0 for none or
// ReserveToLimit.
func hugePagesReservation(setting string, heapState bool) (int64, error) {
	switch s := strings.TrimSpace(setting); s {
	case hugePagesAuto:
		if heapState {
			return ReserveToLimit, nil
		}
		return 0, nil
	case hugePagesOn:
		return ReserveToLimit, nil
	case hugePagesOff, "":
		return 0, nil
	default:
		if n, err := file.ParseByteSize(s); err == nil && n > 0 {
			return int64(n), nil
		}
	}
	return 0, usageError("huge pages %q: want auto, on, off or a size such as 8GiB (--%s or %s)", setting, keyHugePages, envName(keyHugePages))
}

// ReserveHugePages advises up to n bytes of heap address space
// (ReserveToLimit: the soft memory limit) for transparent huge pages
// (hugeheap.Reserve), at most DefaultMemoryLimit (a GOMEMLIMIT or size
// above the machine's memory must not become a mapping the kernel
// refuses), and logs what it did. Call it after TuneMemory, before the
// pipeline allocates its state. Benchmarks that run pipelines in-process
// call it too.
func ReserveHugePages(logger *slog.Logger, n int64) hugeheap.Result {
	ceiling, ok := DefaultMemoryLimit()
	if !ok {
		r := hugeheap.Result{Mode: hugeheap.Mode(), Why: "the machine's memory is unknown"}
		logger.Debug("heap not advised for huge pages", "thp", r.Mode, "why", r.Why)
		return r
	}
	if n == ReserveToLimit {
		n = debug.SetMemoryLimit(-1)
	}
	r := hugeheap.Reserve(min(n, ceiling))
	if r.Advised > 0 {
		logger.Debug("heap advised for huge pages", "thp", r.Mode, "bytes", r.Advised)
	} else {
		logger.Debug("heap not advised for huge pages", "thp", r.Mode, "why", r.Why)
	}
	return r
}

// heapKeyedState tells whether the plan keeps keyed state on the Go heap:
// the memory backend, and a step that partitions its input by key.
func heapKeyedState(plan *pipeline.Plan) bool {
	if plan.Spec.State.Backend != "memory" {
		return false
	}
	for _, n := range plan.Nodes {
		for _, e := range n.Inputs {
			if e.Partition == pipeline.Hash {
				return true
			}
		}
	}
	return false
}
