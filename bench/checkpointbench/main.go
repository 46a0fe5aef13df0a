// Command checkpointbench measures what checkpoints cost a keyed windowed
// pipeline whose live keyed state is about 1 GiB, for each state backend
// (memory, bbolt), against the same pipeline without checkpoints, run
// alternately in the same command (the machine is noisy: compare ratios).
//
//	go run ./bench/checkpointbench                   # defaults: 1 GiB, 3 rounds of 30s
//	go run ./bench/checkpointbench -state-mb 128 -duration 10s -runs 1
//
// The pipeline (generated, in-process through pipeline.Start): an
// unbounded generator of records {id: i % keys, v, ts: i / 1000, payload:
// -value-bytes distinct per record (the counter and a constant filler)} ->
// key_by id, a 24h tumbling window aggregating n: count(), avg_v: avg(v),
// last: last(payload) -> blackhole. Every key thus holds one open window
// whose accumulator keeps the latest full payload ("count, average and
// latest reading per device and day"): keys = state-mb / (value-bytes + ~70
// bytes of entry overhead), and the state stays at its size once every key
// was seen. Keys are visited round-robin, so every key is written between
// two checkpoints (the worst case for the memory backend's copy-on-write
// and for the bbolt cache); -random-keys visits them in a scrambled order
// instead (keys of consecutive records are far apart in the bbolt file,
// so each cache flush writes pages all over it); -hot-keys 0.1 updates
// only a tenth of the keys after the warm-up (the rest of the state stays
// as it is, which incremental checkpoints, the backends' -incremental
// variants, do not write again).
//
// Each run: start, warm up until every key has state, then measure for
// -duration the records/s that reach the window step, then cancel the job
// (no final checkpoint, no window firing). Per backend the runs alternate
// none, interval 10s, interval 1s (-intervals), -runs times, after an
// unmeasured round of runs of 10s plus two intervals (the heap grows to
// its largest, and faults its pages in, once for the whole process); the best
// throughput of each is reported with the loss against the best none, and
// the median and the mean of each round's loss against that round's none,
// the mean with its 95% confidence interval (Student's t): with GC percent
// 400 the throughput swings with the collector's cycles (several seconds
// each), so single runs differ by 20% and more.
//
// -alternate 30s measures each interval differently: one job, whose
// checkpoints are switched off and on in phases of 30s, each phase on
// against the phases off on either side (alternate.go). The job, its heap
// and its state are the same throughout, so what drifts between separate
// runs (the machine's speed, the collector's rhythm, the warm-up) weighs
// on both sides of a comparison alike.
//
// Checkpoints are written to the real bbolt checkpoint store in a temporary
// directory (-dir). The store and the acks are instrumented: for every
// checkpoint triggered inside a measurement window (the run goes on,
// unmeasured, until those completed), the duration from the trigger to
// Complete returning (the coordinator's "checkpoint complete" duration),
// split into align+sync (trigger to the last task's ack: barrier travel,
// alignment, the synchronous snapshot), encode (a window subtask's ack to
// the Close of its state part: WriteTo on a goroutine of the coordinator's,
// streaming into the part's file, so the page cache's copy is included),
// write (the Close: fsync) and complete (the metadata transaction and
// retention); "async" is the share after the last ack.
// Size is the sum of the state parts: the encoded snapshot. With few
// checkpoints, p99 is the maximum (nearest rank).
//
// Restore, after the last run with checkpoints of each backend: open the
// store, Latest (reads and checks every byte of the newest checkpoint),
// then pipeline.Start with it until every window subtask has processed its
// first record (each subtask reads its part, splits its key groups and
// restores them into its backend: decoded into Go maps, or written into
// the bbolt live file; the source seeks to its position).
//
// Memory: the benchmark runs with the GC settings of `eddy run` (GC percent
// 400, a soft memory limit at 75% of the machine's memory or 90% of the
// container's; -gc-percent and -memlimit change them). The memory backend
// with 1 GiB of state then reaches its soft limit (snapshot buffers and the
// frozen copy double the live heap), where the collector works harder.
// Like `eddy run`, the benchmark re-executes itself first so that freed
// memory goes back to the kernel lazily (GODEBUG madvdontneed=0, unless
// GODEBUG sets madvdontneed: set madvdontneed=1 to measure Go's default).
// With -huge-pages it also advises the heap up to the soft limit for
// transparent huge pages, as `eddy run --huge-pages on` does (where the
// THP mode is madvise; the second header line says which).
// Each run line reports the system share of the CPU and the minor page
// faults per record, where eager returns show.
//
// Pages touched for the first time are expensive, and more so in a VM
// whose host takes back the memory its guest frees (virtio-balloon free
// page reporting, as on the development VM): with -timeline, a run whose
// heap grew past its earlier peak spent up to 0.85 of a core in the
// kernel for 9 s, at 130-160 k records/s instead of about 1 M. Before the
// first run the benchmark therefore touches about as much heap as the
// memory backend's runs use at most (-prefault-mb), and frees it lazily:
// later heap growth reuses those pages, which stay the process's until the
// kernel needs the memory. On a later development VM the prefault made the
// memory backend's encoding more expensive with 4 KiB pages (a mean encode
// of 2.26-2.33 s against 1.44-1.83 s with -prefault-mb 0;
// docs/checkpoints.md, "The heap in huge pages"): with -alternate, whose
// warm-up and unmeasured phase take the first touches, -prefault-mb 0 is
// closer to `eddy run`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eddy-stream/eddy/bench/internal/stats"
	"github.com/eddy-stream/eddy/cmd"
	_ "github.com/eddy-stream/eddy/connectors/all" // generator, blackhole
	"github.com/eddy-stream/eddy/internal/cputime"
	"github.com/eddy-stream/eddy/internal/hugeheap"
	_ "github.com/eddy-stream/eddy/operators" // key_by windows
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

var (
	stateMB      = flag.Int("state-mb", 1024, "target size of the keyed state (encoded snapshot), MiB")
	valueBytes   = flag.Int("value-bytes", 1024, "bytes of the payload each key keeps")
	duration     = flag.Duration("duration", 30*time.Second, "measured steady phase of each run")
	runs         = flag.Int("runs", 3, "rounds of (none, each interval) per backend; the best is reported")
	backendsFlag = flag.String("backends", "memory,bbolt", "state backends, comma-separated; a -incremental suffix (memory-incremental, bbolt-incremental) sets checkpoint.incremental")
	intervalFlag = flag.String("intervals", "10s,1s", "checkpoint intervals, comma-separated; a -low suffix (10s-low) sets checkpoint.priority: low")
	parallelism  = flag.Int("parallelism", 1, "parallelism of the window step (the generator runs at 1)")
	randomKeys   = flag.Bool("random-keys", false, "update the keys in a scrambled order instead of in turn (each bbolt flush then writes pages far apart)")
	hotKeys      = flag.Float64("hot-keys", 0, "after the warm-up, update only this share of the keys (0.1: a tenth of them, in turn), so that the rest of the state stays as it is: what incremental checkpoints save")
	cacheEntries = flag.Int("cache-entries", 0, "bbolt backend: state.cache_entries (0: its default)")
	dirFlag      = flag.String("dir", "", "parent of the temporary state dirs (default: the system's temporary directory)")
	restoreFlag  = flag.Bool("restore", true, "measure a restore from the last checkpoint of each backend")
	cpuProfile   = flag.String("cpuprofile", "", "write a CPU profile of each (backend, mode)'s last measurement window to PREFIX-<backend>-<mode>.pprof (with -alternate: of each phase, to PREFIX-<backend>-<mode>-<phase>-<on|off>.pprof)")
	traceFile    = flag.String("trace", "", "write an execution trace (go tool trace) of each (backend, mode)'s last measurement window to PREFIX-<backend>-<mode>.trace")
	blockProfile = flag.String("blockprofile", "", "write the block profile (goroutines waiting >= 1ms, cumulative since the start) after each (backend, mode)'s last measurement window to PREFIX-<backend>-<mode>.pprof")
	timeline     = flag.Duration("timeline", 0, "print the records/s of each such period of each (backend, mode)'s last measurement window, with the checkpoint phase under way")
	hugePages    = flag.Bool("huge-pages", false, "advise the heap for transparent huge pages up to the soft memory limit, as `eddy run --huge-pages on` does (see internal/hugeheap)")
	gcPercent    = flag.Int("gc-percent", cmd.DefaultGCPercent, "Go GC percent, as `eddy run --gc-percent` (GOGC, when set, wins)")
	memLimit     = flag.Int("memlimit", 0, "Go soft memory limit, MiB (debug.SetMemoryLimit); 0: what `eddy run` sets (GOMEMLIMIT, or below the container's and the machine's memory)")
	verbose      = flag.Bool("v", false, "log the runtime's info messages (checkpoint complete, ...)")
	alternate    = flag.Duration("alternate", 0, "instead of separate runs, run each interval as one job whose checkpoints are switched off and on in phases of this length (off, on, off, ..., -runs phases on), each phase on against the phases off beside it (see alternate.go)")
	prefaultMB   = flag.Int("prefault-mb", -1, "before the first run, touch this much new Go heap once and free it again, MiB (-1: 16 times -state-mb, at most the soft memory limit; 0: none), so that no run pays the first touch of its pages (see the package comment)")
)

// fatalf reports a failure and exits.
var fatalf = log.Fatalf

const (
	stepID = "per_key"
	// entryOverhead estimates the encoded bytes of a key's entry besides
	// its payload (key, namespace, accumulators, framing).
	entryOverhead = 70
)

func main() {
	cmd.ReleaseMemoryLazily() // as `eddy run`: re-executes with GODEBUG madvdontneed=0
	flag.Parse()
	log.SetFlags(0)
	if *stateMB <= 0 || *valueBytes <= 0 || *runs <= 0 || *parallelism <= 0 || *duration <= 0 {
		log.Fatal("-state-mb, -value-bytes, -runs, -parallelism and -duration must be positive")
	}
	keys := max(1, *stateMB<<20/(*valueBytes+entryOverhead))
	cmd.TuneMemory(slog.Default(), *gcPercent)
	if *memLimit > 0 {
		debug.SetMemoryLimit(int64(*memLimit) << 20)
	}
	var huge hugeheap.Result
	if *hugePages {
		huge = cmd.ReserveHugePages(slog.Default(), cmd.ReserveToLimit)
	}
	if *blockProfile != "" {
		runtime.SetBlockProfileRate(int(time.Millisecond))
	}
	modes := []mode{{name: "none"}}
	for _, s := range strings.Split(*intervalFlag, ",") {
		s, low := strings.CutSuffix(strings.TrimSpace(s), "-low")
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			log.Fatalf("-intervals: %q is not a positive duration", s)
		}
		name := d.String()
		if low {
			name += "-low"
		}
		modes = append(modes, mode{name: name, interval: d, low: low})
	}
	parent, err := os.MkdirTemp(*dirFlag, "checkpointbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(parent)
	// A failed run leaves gigabytes of state behind: remove them first.
	fatalf = func(format string, args ...any) {
		_ = os.RemoveAll(parent)
		log.Fatalf(format, args...)
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	fmt.Printf("state target %d MiB: %d keys x %d-byte payload, window parallelism %d, %d cores, GOMAXPROCS %d\n",
		*stateMB, keys, *valueBytes, *parallelism, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	limit := "none"
	if l := debug.SetMemoryLimit(-1); l < 1<<62 {
		limit = mib(l)
	}
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	fmt.Printf("checkpoints: exactly_once, max_concurrent 1, retain 2, to bbolt on disk; Go GC percent %d, memory limit %s", gc, limit)
	if adv := cmd.ReleaseAdvice(); adv != "" {
		fmt.Printf(", freed memory returned with %s", adv)
	}
	switch {
	case huge.Advised > 0:
		fmt.Printf("; THP mode %s, %s of heap advised for huge pages", huge.Mode, mib(huge.Advised))
	case *hugePages:
		fmt.Printf("; THP mode %q, heap not advised for huge pages: %s", huge.Mode, huge.Why)
	default:
		fmt.Printf("; THP mode %q, heap not advised for huge pages (-huge-pages=false)", hugeheap.Mode())
	}
	fmt.Println()
	if *alternate > 0 {
		fmt.Printf("each interval: one job, warm-up until every key has state, an unmeasured phase with checkpoints, then phases of %s with checkpoints off and on: %d on, %d off\n\n",
			*alternate, *runs, *runs+1)
	} else {
		fmt.Printf("each run: warm-up until every key has state, then %s measured; an unmeasured round (10s, plus two intervals with checkpoints, each at most %s), then %d round(s) of %s per backend\n\n",
			*duration, *duration, *runs, strings.Join(modeNames(modes), ", "))
	}
	begin := time.Now()
	if n := prefaultSize(); n > 0 {
		u0 := cputime.ProcessUsage()
		prefaultHeap(n)
		u := cputime.ProcessUsage().Sub(u0)
		fmt.Printf("prefaulted %s of heap: %s, %.1f CPU-s (%.0f%% system), %d page faults\n\n",
			mib(n), time.Since(begin).Round(100*time.Millisecond), u.CPU.Seconds(), 100*u.System.Seconds()/u.CPU.Seconds(), u.MinorFaults)
	}
	for _, backend := range strings.Split(*backendsFlag, ",") {
		backend = strings.TrimSpace(backend)
		b := &bench{backend: backend, keys: keys, parent: parent, logger: logger}
		if *alternate > 0 {
			for _, m := range modes[1:] {
				rep, err := b.alternate(m)
				if err != nil {
					fatalf("%s %s alternating: %v", backend, m.name, err)
				}
				freeMemory()
				fmt.Printf("\n%s\n", rep)
			}
			continue
		}
		res := map[string][]runResult{}
		// lastDir keeps the state dir of the last run with checkpoints,
		// for the restore.
		lastDir := ""
		// Round 0 warms the process up: its heap grows to its largest
		// for the first time there, and each new page faults in once; in
		// a measured round that would flatter the modes run after it.
		for r := 0; r <= *runs; r++ {
			for _, m := range modes {
				rr, err := b.run(m, r, r == *runs)
				if err != nil {
					fatalf("%s %s run %d: %v", backend, m.name, r, err)
				}
				fmt.Println(rr.line(backend, m.name, r))
				if r == 0 {
					_ = os.RemoveAll(rr.dir)
					freeMemory()
					continue
				}
				res[m.name] = append(res[m.name], rr)
				if m.interval > 0 {
					if lastDir != "" {
						_ = os.RemoveAll(lastDir)
					}
					lastDir = rr.dir
				} else {
					_ = os.RemoveAll(rr.dir)
				}
				freeMemory()
			}
		}
		rep := summary(backend, modes, res)
		if *restoreFlag && lastDir != "" {
			rs, err := b.restore(lastDir)
			if err != nil {
				fatalf("%s restore: %v", backend, err)
			}
			rep += rs
		}
		if lastDir != "" {
			_ = os.RemoveAll(lastDir)
		}
		freeMemory()
		fmt.Println()
		fmt.Print(rep)
		fmt.Println()
	}
	fmt.Printf("total time %s\n", time.Since(begin).Round(time.Second))
}

type mode struct {
	name     string
	interval time.Duration // 0: no checkpoint block
	low      bool          // checkpoint.priority: low
}

func modeNames(ms []mode) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.name)
	}
	return out
}

// warmRoundDuration bounds mode m's run in the unmeasured first round:
// 10s, plus two intervals with checkpoints, so that the heap grows as far
// as snapshots make it grow and its pages are faulted in before the
// measured rounds (the kernel zeroing new pages cost the first measured
// round up to 0.7 of a core, in bursts, when the warm run was 10s).
func warmRoundDuration(m mode) time.Duration {
	return 10*time.Second + 2*m.interval
}

// prefaultSize is the heap that -prefault-mb asks to touch, in bytes.
func prefaultSize() int64 {
	if *prefaultMB >= 0 {
		return int64(*prefaultMB) << 20
	}
	// The memory backend peaked at 11-17 GiB of Go memory with 1 GiB of
	// state, depending on the interval and the priority.
	return min(int64(*stateMB)<<24, debug.SetMemoryLimit(-1))
}

// prefaultHeap allocates n bytes of heap, writes a byte of each page, and
// frees it all, with the collector off meanwhile (a heap grown to the soft
// limit would make it collect without end).
func prefaultHeap(n int64) {
	const chunk = 64 << 20
	gc := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	for got := int64(0); got < n; got += chunk {
		b := make([]byte, chunk) // with the collector off, no chunk is reused
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
	}
	debug.SetMemoryLimit(limit)
	debug.SetGCPercent(gc)
	freeMemory()
}

func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// spec is the pipeline of the benchmark for a backend and a checkpoint
// interval (0: none), with checkpoint.priority: low when low.
func spec(backend string, keys int, interval time.Duration, low bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nname: checkpoint-bench\nparallelism: %d\n", *parallelism)
	backend, incremental := strings.CutSuffix(backend, "-incremental")
	if interval > 0 {
		fmt.Fprintf(&b, "checkpoint:\n  interval: %s\n  timeout: 30m\n  tolerable_failures: 1000\n  retain: 2\n  incremental: %t\n", interval, incremental)
		if low {
			b.WriteString("  priority: low\n")
		}
	}
	fmt.Fprintf(&b, "state:\n  backend: %s\n", backend)
	if *cacheEntries > 0 {
		fmt.Fprintf(&b, "  cache_entries: %d\n", *cacheEntries)
	}
	fmt.Fprintf(&b, `sources:
  - id: gen
    type: generator
    parallelism: 1
    fields:
      id: '%s'
      v: i %% 100
      ts: i / 1000
      payload: string(i) + "%s"
    event_time: ts
steps:
  - id: %s
    key_by: id
    window: {type: tumbling, size: 24h}
    aggregate:
      n: count()
      avg_v: avg(v)
      last: last(payload)
sinks:
  - id: out
    type: blackhole
`, idExpr(keys), strings.Repeat("x", max(0, *valueBytes-8)), stepID)
	return b.String()
}

type bench struct {
	backend string
	keys    int
	parent  string
	logger  *slog.Logger
}

// runResult is one run's measurement.
type runResult struct {
	dir          string
	warmup       time.Duration
	rate         float64 // records/s in the measured window
	cpuPerRec    float64 // process CPU (user and system) per record in the window, µs
	sysShare     float64 // the system part of that CPU
	faultsPerRec float64 // minor page faults per record in the window
	checkpoints  []ckpt  // completed inside the window
	failed       int
	peakMem      uint64
}

func (r runResult) line(backend, mode string, round int) string {
	run := fmt.Sprintf("run %d", round)
	if round == 0 {
		run = "warm " // not measured
	}
	s := fmt.Sprintf("%-6s %-7s %s: warm-up %6s, %9.0f records/s, %.2f µs CPU/record (system %.0f%%, %.3f page faults/record)",
		backend, mode, run, r.warmup.Round(100*time.Millisecond), r.rate, r.cpuPerRec, 100*r.sysShare, r.faultsPerRec)
	if len(r.checkpoints) > 0 {
		var ds []time.Duration
		var size int64
		for _, c := range r.checkpoints {
			ds = append(ds, c.total())
			size = max(size, c.stateBytes)
		}
		slices.Sort(ds)
		s += fmt.Sprintf(", %d checkpoints in window (max %s, %s)", len(ds), ds[len(ds)-1].Round(time.Millisecond), mib(size))
	}
	if r.failed > 0 {
		s += fmt.Sprintf(", %d FAILED", r.failed)
	}
	return s + fmt.Sprintf(", Go memory peak %s", mib(int64(r.peakMem)))
}

// run runs the pipeline once with mode m and measures it. profile: write
// the profiles asked for (the last round's).
func (b *bench) run(m mode, round int, profile bool) (res runResult, err error) {
	dir, err := os.MkdirTemp(b.parent, fmt.Sprintf("%s-%s-%d-", b.backend, m.name, round))
	if err != nil {
		return res, err
	}
	res.dir = dir
	plan, err := compile(spec(b.backend, b.keys, m.interval, m.low))
	if err != nil {
		return res, err
	}
	rec := newRecorder()
	mets := pipeline.NewMetrics()
	opts := pipeline.JobOptions{Logger: b.logger, Metrics: mets, StateDir: dir}
	var store *statestore.CheckpointStore
	if m.interval > 0 {
		store, err = statestore.OpenCheckpointStore(dir, statestore.CheckpointStoreOptions{Retain: 2, Logger: b.logger})
		if err != nil {
			return res, err
		}
		defer func() { _ = store.Close(context.Background()) }()
		opts.Store = recStore{inner: pipeline.BoltCheckpoints(store), rec: rec}
		opts.OnAck = rec.onAck
	}
	in := windowIn(mets, *parallelism)
	start := time.Now()
	job, err := pipeline.Start(context.Background(), plan, opts)
	if err != nil {
		return res, err
	}
	mem := startMemSampler()
	defer func() { res.peakMem = mem.stop() }()
	// Warm up until every key has state.
	for in() < float64(b.keys) {
		select {
		case <-job.Done():
			return res, fmt.Errorf("the job ended during the warm-up: %v", job.Wait())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t0, c0, use0 := time.Now(), in(), cputime.ProcessUsage()
	res.warmup = t0.Sub(start)
	var prof *os.File
	if profile && *cpuProfile != "" {
		if prof, err = os.Create(fmt.Sprintf("%s-%s-%s.pprof", *cpuProfile, b.backend, m.name)); err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(prof); err != nil {
			return res, err
		}
	}
	if profile && *traceFile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%s-%s.trace", *traceFile, b.backend, m.name))
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return res, err
		}
	}
	var samples []sample
	first := takeSample(t0, c0)
	measure := *duration
	if round == 0 {
		measure = min(measure, warmRoundDuration(m))
	}
	end := time.After(measure)
	var tick <-chan time.Time // nil: never, without -timeline
	if profile && *timeline > 0 {
		tk := time.NewTicker(*timeline)
		defer tk.Stop()
		tick = tk.C
	}
wait:
	for {
		select {
		case <-job.Done():
			return res, fmt.Errorf("the job ended: %v", job.Wait())
		case t := <-tick:
			samples = append(samples, takeSample(t, in()))
		case <-end:
			break wait
		}
	}
	t1, c1, use := time.Now(), in(), cputime.ProcessUsage().Sub(use0)
	if prof != nil {
		pprof.StopCPUProfile()
		_ = prof.Close()
	}
	if profile && *traceFile != "" {
		trace.Stop()
	}
	if profile && *blockProfile != "" {
		if err := writeProfile("block", fmt.Sprintf("%s-%s-%s.pprof", *blockProfile, b.backend, m.name)); err != nil {
			return res, err
		}
	}
	res.rate = (c1 - c0) / t1.Sub(t0).Seconds()
	res.cpuPerRec = float64(use.CPU.Microseconds()) / (c1 - c0)
	res.sysShare = use.System.Seconds() / use.CPU.Seconds()
	res.faultsPerRec = float64(use.MinorFaults) / (c1 - c0)
	// Let the checkpoints triggered in the window complete (not measured).
	for deadline := time.Now().Add(10 * time.Minute); rec.inFlight(t1) && time.Now().Before(deadline); {
		select {
		case <-job.Done():
			return res, fmt.Errorf("the job ended: %v", job.Wait())
		case <-time.After(10 * time.Millisecond):
		}
	}
	job.Cancel()
	if err := job.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	res.checkpoints, res.failed = rec.within(t0, t1)
	if len(samples) > 0 {
		printTimeline(b.backend, m.name, first, samples, res.checkpoints)
	}
	return res, nil
}

// sample is the records count at a moment of the measurement window, with
// the process's CPU time, its system part, the part the Go runtime
// estimates the GC took (runtime/metrics) and the busy time of the whole
// machine, so that a dip shows whether a GC cycle ran, whether the kernel
// worked for the process (page faults), or for something else (another
// process, the kernel's own threads: write-back, reclaim).
type sample struct {
	t                      time.Time
	n                      float64
	cpu, sys, gcs, machine float64 // seconds
}

var gcCPU = []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}

func takeSample(t time.Time, n float64) sample {
	metrics.Read(gcCPU)
	u := cputime.ProcessUsage()
	return sample{t: t, n: n, cpu: u.CPU.Seconds(), sys: u.System.Seconds(), gcs: gcCPU[0].Value.Float64(), machine: cputime.Machine().Seconds()}
}

// printTimeline prints, for each period between samples, the records/s,
// the cores the process used, of them in the kernel and by the GC, the
// cores busy on the whole machine, and the phase of the checkpoint under
// way at its end: sync (trigger to the last ack), encode (to the first
// state part's Close), write (to Complete), complete.
func printTimeline(backend, mode string, start sample, samples []sample, cs []ckpt) {
	fmt.Printf("timeline %s %s:  records/s, cores used by the process (in the kernel, by the GC), cores busy on the machine, checkpoint phase\n", backend, mode)
	prev := start
	for _, sm := range samples {
		phase := ""
		for _, c := range cs {
			switch t := sm.t; {
			case t.Before(c.begin) || !t.Before(c.done):
			case t.Before(c.lastAck):
				phase = fmt.Sprintf("checkpoint %d sync", c.id)
			case t.Before(c.lastAck.Add(c.encode)):
				phase = fmt.Sprintf("checkpoint %d encode", c.id)
			case t.Before(c.completeAt):
				phase = fmt.Sprintf("checkpoint %d write", c.id)
			default:
				phase = fmt.Sprintf("checkpoint %d complete", c.id)
			}
		}
		d := sm.t.Sub(prev.t).Seconds()
		fmt.Printf("  %+7.2fs %9.0f records/s  %4.2f cores (kernel %4.2f, gc %4.2f)  machine %4.2f  %s\n", sm.t.Sub(start.t).Seconds(), (sm.n-prev.n)/d,
			(sm.cpu-prev.cpu)/d, (sm.sys-prev.sys)/d, (sm.gcs-prev.gcs)/d, (sm.machine-prev.machine)/d, phase)
		prev = sm
	}
}

// restore measures a restore from the newest checkpoint in dir.
func (b *bench) restore(dir string) (string, error) {
	plan, err := compile(spec(b.backend, b.keys, time.Hour, false)) // no checkpoint during the restore
	if err != nil {
		return "", err
	}
	freeMemory()
	ctx := context.Background()
	t0 := time.Now()
	store, err := statestore.OpenCheckpointStore(dir, statestore.CheckpointStoreOptions{Retain: 2, Logger: b.logger})
	if err != nil {
		return "", err
	}
	defer func() { _ = store.Close(ctx) }()
	t1 := time.Now()
	cp, err := store.Latest(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = cp.Close() }()
	t2 := time.Now()
	var next int64
	list, err := store.List()
	if err != nil {
		return "", err
	}
	for _, c := range list {
		next = max(next, c.ID+1)
	}
	mets := pipeline.NewMetrics()
	opts := pipeline.JobOptions{Logger: b.logger, Metrics: mets, StateDir: dir, Store: pipeline.BoltCheckpoints(store),
		Restore: pipeline.RestoredFrom(cp), FirstCheckpointID: next}
	started := make([]func() float64, *parallelism)
	for i := range started {
		started[i] = windowIn(mets, 1, i)
	}
	if *cpuProfile != "" {
		prof, err := os.Create(fmt.Sprintf("%s-%s-restore.pprof", *cpuProfile, b.backend))
		if err != nil {
			return "", err
		}
		if err := pprof.StartCPUProfile(prof); err != nil {
			return "", err
		}
		defer prof.Close()
	}
	job, err := pipeline.Start(ctx, plan, opts)
	if err != nil {
		return "", err
	}
	for slices.ContainsFunc(started, func(f func() float64) bool { return f() == 0 }) {
		select {
		case <-job.Done():
			return "", fmt.Errorf("the restored job ended: %v", job.Wait())
		case <-time.After(time.Millisecond):
		}
	}
	t3 := time.Now()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	job.Cancel()
	if err := job.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return "", err
	}
	var state int64
	chain := ""
	for _, p := range cp.Parts() {
		if strings.HasPrefix(p.Name, "op/") {
			state += p.Size
		}
		if p.Base != 0 {
			chain = fmt.Sprintf(", a delta on checkpoint %d: its chain is merged", p.Base)
		}
	}
	return fmt.Sprintf("restore of checkpoint %d (%s of keyed state stored, %s in all%s): %s = open store %s + verify (Latest) %s + start to first record %s\n",
		cp.ID(), mib(state), mib(cp.Size()), chain, t3.Sub(t0).Round(time.Millisecond), t1.Sub(t0).Round(time.Millisecond),
		t2.Sub(t1).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond)), nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func compile(yaml string) (*pipeline.Plan, error) {
	spec, err := pipeline.Load(pipeline.Default, "checkpointbench.yaml", []byte(yaml))
	if err != nil {
		return nil, err
	}
	return pipeline.Compile(spec)
}

// windowIn returns a function that sums the records received by the
// window step's subtasks (all of them, or those listed).
func windowIn(m *pipeline.Metrics, par int, only ...int) func() float64 {
	subs := only
	if len(subs) == 0 {
		for i := range par {
			subs = append(subs, i)
		}
	}
	counters := make([]func() float64, 0, len(subs))
	for _, s := range subs {
		c := m.RecordsIn(pipeline.SubtaskInfo{ID: stepID, Subtask: s})
		counters = append(counters, func() float64 { return pipeline.CounterValue(c) })
	}
	return func() float64 {
		var n float64
		for _, c := range counters {
			n += c()
		}
		return n
	}
}

// memSampler records the peak of the memory the Go runtime holds from the
// system (mapped, less what it released): about its resident size.
type memSampler struct {
	stopc chan struct{}
	done  chan uint64
}

func startMemSampler() *memSampler {
	s := &memSampler{stopc: make(chan struct{}), done: make(chan uint64)}
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
		var peak uint64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64()-sample[1].Value.Uint64())
			select {
			case <-s.stopc:
				s.done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *memSampler) stop() uint64 {
	close(s.stopc)
	return <-s.done
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// ckpt is what the instrumented store and acks saw of one checkpoint.
type ckpt struct {
	id         int64
	begin      time.Time // trigger (Begin)
	lastAck    time.Time // the last task's ack: every synchronous part done
	stateAck   map[string]time.Time
	encode     time.Duration // summed over state parts: ack -> Close (encoded and written to the page cache)
	write      time.Duration // summed over state parts: Close (fsync)
	stateBytes int64
	deltaParts int       // of the state parts, those written as deltas
	completeAt time.Time // Complete called
	done       time.Time // Complete returned nil
	failed     bool
}

func (c *ckpt) total() time.Duration { return c.done.Sub(c.begin) }

// recorder collects ckpts; its methods run on task goroutines, the
// coordinator's and its writers'.
type recorder struct {
	mu sync.Mutex
	m  map[int64]*ckpt
}

func newRecorder() *recorder { return &recorder{m: map[int64]*ckpt{}} }

func (r *recorder) get(id int64) *ckpt {
	c := r.m[id]
	if c == nil {
		c = &ckpt{id: id, stateAck: map[string]time.Time{}}
		r.m[id] = c
	}
	return c
}

func (r *recorder) onAck(a pipeline.Ack) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.get(a.Checkpoint)
	if now.After(c.lastAck) {
		c.lastAck = now
	}
	for id := range a.States {
		c.stateAck[fmt.Sprintf("op/%s/%d", id, a.Subtask)] = now
	}
}

// inFlight reports whether a checkpoint triggered before t is neither
// complete nor failed.
func (r *recorder) inFlight(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.m {
		if !c.begin.IsZero() && c.begin.Before(t) && c.done.IsZero() && !c.failed {
			return true
		}
	}
	return false
}

// within returns the checkpoints triggered in [t0, t1) that completed,
// and how many of them failed.
func (r *recorder) within(t0, t1 time.Time) ([]ckpt, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ckpt
	failed := 0
	for _, c := range r.m {
		if c.begin.Before(t0) || !c.begin.Before(t1) {
			continue
		}
		switch {
		case c.failed:
			failed++
		case !c.done.IsZero():
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b ckpt) int { return int(a.id - b.id) })
	return out, failed
}

// recStore wraps the checkpoint store to time each checkpoint's steps.
type recStore struct {
	inner pipeline.CheckpointStore
	rec   *recorder
}

func (s recStore) Begin(id int64, meta pipeline.CheckpointMeta) (pipeline.PendingCheckpoint, error) {
	now := time.Now()
	p, err := s.inner.Begin(id, meta)
	if err != nil {
		return nil, err
	}
	s.rec.mu.Lock()
	s.rec.get(id).begin = now
	s.rec.mu.Unlock()
	return recPending{inner: p, id: id, rec: s.rec}, nil
}

type recPending struct {
	inner pipeline.PendingCheckpoint
	id    int64
	rec   *recorder
}

func (p recPending) Put(part string, blob []byte) error {
	t0 := time.Now()
	err := p.inner.Put(part, blob)
	p.record(part, len(blob), t0, time.Now())
	return err
}

// Create passes the coordinator's streamed state part on to the store, as
// the coordinator does without this wrapper, and times it: the encoding
// (the ack to Close, writes into the page cache included), then Close (the
// fsync).
func (p recPending) Create(part string) (pipeline.PartWriter, error) {
	pc, ok := p.inner.(pipeline.PartCreator)
	if !ok {
		return nil, fmt.Errorf("the store does not stream parts")
	}
	w, err := pc.Create(part)
	if err != nil {
		return nil, err
	}
	return &recWriter{PartWriter: w, p: p, part: part}, nil
}

// CreateDelta is Create for a delta part (checkpoint.incremental).
func (p recPending) CreateDelta(part string, base int64) (pipeline.PartWriter, error) {
	dc, ok := p.inner.(pipeline.DeltaCreator)
	if !ok {
		return nil, fmt.Errorf("the store takes no delta parts")
	}
	w, err := dc.CreateDelta(part, base)
	if err != nil {
		return nil, err
	}
	return &recWriter{PartWriter: w, p: p, part: part, delta: true}, nil
}

type recWriter struct {
	pipeline.PartWriter
	p     recPending
	part  string
	n     int
	delta bool
}

func (w *recWriter) Write(b []byte) (int, error) {
	n, err := w.PartWriter.Write(b)
	w.n += n
	return n, err
}

func (w *recWriter) Close() error {
	t0 := time.Now()
	err := w.PartWriter.Close()
	w.p.record(w.part, w.n, t0, time.Now())
	if w.delta {
		w.p.rec.mu.Lock()
		w.p.rec.get(w.p.id).deltaParts++
		w.p.rec.mu.Unlock()
	}
	return err
}

// record adds a state part to its checkpoint: encoded (and written) from
// its ack to t0, then put or fsynced from t0 to t1.
func (p recPending) record(part string, size int, t0, t1 time.Time) {
	if !strings.HasPrefix(part, "op/") {
		return
	}
	p.rec.mu.Lock()
	c := p.rec.get(p.id)
	if a, ok := c.stateAck[part]; ok {
		c.encode += t0.Sub(a)
	}
	c.write += t1.Sub(t0)
	c.stateBytes += int64(size)
	p.rec.mu.Unlock()
}

func (p recPending) Complete(ctx context.Context) error {
	t0 := time.Now()
	err := p.inner.Complete(ctx)
	t1 := time.Now()
	p.rec.mu.Lock()
	c := p.rec.get(p.id)
	c.completeAt = t0
	if err == nil {
		c.done = t1
	} else {
		c.failed = true
	}
	p.rec.mu.Unlock()
	return err
}

func (p recPending) Abort() error { return p.inner.Abort() }

// summary reports the best throughput of each mode, the loss against none,
// and the checkpoint durations of each interval over all its runs.
func summary(backend string, modes []mode, res map[string][]runResult) string {
	var b strings.Builder
	best := map[string]float64{}
	for _, m := range modes {
		for _, r := range res[m.name] {
			best[m.name] = max(best[m.name], r.rate)
		}
	}
	fmt.Fprintf(&b, "== %s backend: best of %d run(s)\n", backend, len(res["none"]))
	for _, m := range modes {
		loss := ""
		if m.interval > 0 && best["none"] > 0 {
			loss = fmt.Sprintf("  loss %5.1f%%", 100*(1-best[m.name]/best["none"]))
			// Each round's run against that round's none: the mean loss
			// with its 95% confidence interval.
			var ratios []float64
			for r, run := range res[m.name] {
				ratios = append(ratios, run.rate/res["none"][r].rate)
			}
			if len(ratios) > 1 {
				mean, half := stats.MeanCI(ratios)
				loss += fmt.Sprintf("; rounds' losses: median %5.1f%%, mean %5.1f%% ± %.1f%%", 100*(1-stats.Median(ratios)), 100*(1-mean), 100*half)
			}
		}
		fmt.Fprintf(&b, "%-7s %10.0f records/s%s\n", m.name, best[m.name], loss)
	}
	// The CPU a checkpoint costs: the extra CPU per record against none
	// (the round's), times the records, per checkpoint completed in the
	// window. Less noisy than throughput, and what decides the loss on a
	// machine whose cores the pipeline keeps busy.
	for _, m := range modes {
		if m.interval == 0 {
			continue
		}
		var perCkpt []float64
		var size int64
		for r, run := range res[m.name] {
			if len(run.checkpoints) == 0 {
				continue
			}
			records := run.rate * duration.Seconds()
			extra := (run.cpuPerRec - res["none"][r].cpuPerRec) * records / 1e6
			perCkpt = append(perCkpt, extra/float64(len(run.checkpoints)))
			size = max(size, run.checkpoints[0].stateBytes)
		}
		if len(perCkpt) > 1 {
			mean, half := stats.MeanCI(perCkpt)
			fmt.Fprintf(&b, "interval %s: extra CPU per checkpoint %.2f ± %.2f core-s (%s of state)\n", m.name, mean, half, mib(size))
		}
	}
	for _, m := range modes {
		if m.interval == 0 {
			continue
		}
		var cs []ckpt
		failed := 0
		for _, r := range res[m.name] {
			cs = append(cs, r.checkpoints...)
			failed += r.failed
		}
		if len(cs) == 0 {
			fmt.Fprintf(&b, "interval %s: no checkpoint triggered inside a window completed (%d failed)\n", m.name, failed)
			continue
		}
		b.WriteString(durations(m.name, cs))
		if failed > 0 {
			fmt.Fprintf(&b, "interval %s: %d checkpoints FAILED\n", m.name, failed)
		}
	}
	return b.String()
}

// durations reports the checkpoints cs of interval name: how long they
// took, split into their stages, and how large their state was.
func durations(name string, cs []ckpt) string {
	var b strings.Builder
	var ds []time.Duration
	var sync, enc, write, comp time.Duration
	var size, sumSize int64
	deltas := 0
	for _, c := range cs {
		sumSize += c.stateBytes
		if c.deltaParts > 0 {
			deltas++
		}
		ds = append(ds, c.total())
		sync += c.lastAck.Sub(c.begin)
		enc += c.encode
		write += c.write
		comp += c.done.Sub(c.completeAt)
		size = max(size, c.stateBytes)
	}
	slices.Sort(ds)
	n := time.Duration(len(cs))
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	fmt.Fprintf(&b, "interval %s: %d checkpoints, duration p50 %s p99 %s max %s; mean %s = align+sync %s + encode %s + write %s + complete %s (async %.0f%%); state %s\n",
		name, len(cs), pct(ds, 50), pct(ds, 99), ds[len(ds)-1].Round(time.Millisecond), (sum / n).Round(time.Millisecond),
		(sync / n).Round(time.Millisecond), (enc / n).Round(time.Millisecond), (write / n).Round(time.Millisecond),
		(comp / n).Round(time.Millisecond), 100*float64(sum-sync)/float64(sum), mib(size))
	if deltas > 0 {
		fmt.Fprintf(&b, "interval %s: %d of the %d checkpoints with delta parts; state parts written: mean %s, max %s\n",
			name, deltas, len(cs), mib(sumSize/int64(len(cs))), mib(size))
	}
	return b.String()
}

// pct is the p-th percentile of sorted ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	i := (len(ds)*p + 99) / 100
	return ds[max(0, min(len(ds)-1, i-1))].Round(time.Millisecond)
}

// idExpr is the generator's expression of a record's key: the keys in turn,
// or with -random-keys in a scrambled order (a multiplicative hash of the
// record's number), so that consecutive records update keys far apart.
// With -hot-keys, the records after the first keys ones (the warm-up's)
// update only that share of the keys.
func idExpr(keys int) string {
	of := func(n int) string {
		if *randomKeys {
			return fmt.Sprintf("(i * 2654435761) %% %d", n)
		}
		return fmt.Sprintf("i %% %d", n)
	}
	if *hotKeys > 0 && *hotKeys < 1 {
		return fmt.Sprintf("i < %d ? %s : %s", keys, of(keys), of(max(1, int(float64(keys)**hotKeys))))
	}
	return of(keys)
}
