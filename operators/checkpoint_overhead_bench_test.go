package operators

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/internal/memlimit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// The checkpoint benchmarks: what checkpoints cost a keyed window job, for
// each state backend. The job is a generator of records {id: i % keys, v,
// ts, payload: 1 KiB distinct per record} -> key_by id, a 24h tumbling
// window aggregating n: count(), avg_v: avg(v), last: last(payload) ->
// blackhole: every key holds one open window whose accumulator keeps the
// latest payload, and every key is updated between two checkpoints (the
// worst case for the memory backend's copy-on-write and for the bbolt
// cache).
//
//	go test -run XXX -bench 'Checkpoint(Encode|Overhead|Restore)' -count 6 ./operators/ | tee new.txt
//	go run golang.org/x/perf/cmd/benchstat old.txt new.txt
//
// scripts/bench-checkpoint.sh runs them so. With EDDY_BENCH_LARGE=1 the
// state is about 1 GiB (1,000,000 keys), checkpoints every 10s and phases
// of 30s; the default is about 110 MiB, every 1s, phases of 3s. They run
// with the GC settings of `eddy run` (eddyGC).

// eddyGC runs the rest of the benchmark with the GC percent and the soft
// memory limit that `eddy run` sets (GOGC and GOMEMLIMIT, when set, win),
// and restores the test binary's at its end.
func eddyGC(b *testing.B) {
	gc := debug.SetGCPercent(-1)
	debug.SetGCPercent(gc)
	limit := debug.SetMemoryLimit(-1)
	memlimit.Apply(slog.New(slog.DiscardHandler), memlimit.DefaultGCPercent)
	b.Cleanup(func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	})
}

// ckptBench is the size of the checkpoint benchmarks.
type ckptBench struct {
	keys     int
	interval time.Duration // of the job's checkpoints
	phase    time.Duration // of BenchmarkCheckpointOverhead's phases
}

func ckptBenchSize() ckptBench {
	if os.Getenv("EDDY_BENCH_LARGE") != "" {
		return ckptBench{keys: 1_000_000, interval: 10 * time.Second, phase: 30 * time.Second}
	}
	return ckptBench{keys: 100_000, interval: time.Second, phase: 3 * time.Second}
}

// ckptBenchBackends are the state backends the benchmarks run on.
var ckptBenchBackends = []string{"memory", "bbolt"}

// ckptBenchStep is the benchmark's window step.
const ckptBenchStep = "key_by: id\n    window: {type: tumbling, size: 24h}\n    aggregate:\n      n: count()\n      avg_v: avg(v)\n      last: last(payload)"

// ckptBenchPlan compiles the benchmark's job on backend, with checkpoints
// every interval.
func ckptBenchPlan(b *testing.B, backend string, keys int, interval time.Duration) *pipeline.Plan {
	b.Helper()
	text := fmt.Sprintf(`version: 1
name: checkpoint-bench
checkpoint:
  interval: %s
  timeout: 30m
  tolerable_failures: 1000
  retain: 2
state:
  backend: %s
sources:
  - id: gen
    type: generator
    fields:
      id: i %% %d
      v: i %% 100
      ts: i / 1000
      payload: string(i) + "%s"
    event_time: ts
steps:
  - id: per_key
    %s
sinks:
  - id: out
    type: blackhole
`, interval, backend, keys, strings.Repeat("x", 1016), ckptBenchStep)
	spec, err := pipeline.Load(pipeline.Default, "checkpoint-bench.yaml", []byte(text))
	if err != nil {
		b.Fatal(err)
	}
	plan, err := pipeline.Compile(spec)
	if err != nil {
		b.Fatal(err)
	}
	return plan
}

// windowRecords returns the records that reached the window step so far.
func windowRecords(m *pipeline.Metrics) func() float64 {
	c := m.RecordsIn(pipeline.SubtaskInfo{ID: "per_key", Subtask: 0})
	return func() float64 { return pipeline.CounterValue(c) }
}

// awaitRecords waits until the window step received n records.
func awaitRecords(b *testing.B, job *pipeline.Job, in func() float64, n float64) {
	b.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for in() < n {
		select {
		case <-job.Done():
			b.Fatalf("the job ended: %v", job.Wait())
		case <-tick.C:
		}
	}
}

// stopJob cancels job and waits for it.
func stopJob(b *testing.B, job *pipeline.Job) {
	b.Helper()
	job.Cancel()
	if err := job.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}

// BenchmarkCheckpointEncode is the asynchronous part of a checkpoint of
// the benchmark's window state on each backend: Snapshot, then WriteTo
// into a writer that discards the blobs but lends its buffer, as a
// checkpoint's part writer does. ns/key is per key of the state, B/key
// the encoded bytes per key.
func BenchmarkCheckpointEncode(b *testing.B) {
	eddyGC(b)
	keys := ckptBenchSize().keys
	opts := statestore.Options{KeyGroup: func(key string) int { return pipeline.KeyGroup(key, 128) }, KeyGroups: [2]int{0, 128}}
	payload := strings.Repeat("x", 1000)
	for _, name := range ckptBenchBackends {
		b.Run(name, func(b *testing.B) {
			var backend statestore.Backend
			var err error
			if name == "memory" {
				backend, err = statestore.NewMemory(opts)
			} else {
				backend, err = statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: b.TempDir()})
			}
			if err != nil {
				b.Fatal(err)
			}
			op := openWindowOn(b, ckptBenchStep, backend)
			defer func() {
				if err := op.Close(); err != nil {
					b.Error(err)
				}
				if err := backend.Close(); err != nil {
					b.Error(err)
				}
			}()
			discard := pipeline.EmitterFunc(func([]pipeline.Record) error { return nil })
			batch := make([]pipeline.Record, 0, benchBatch)
			for i := range keys {
				id := int64(i)
				key, _ := pipeline.EncodeKey(nil, id)
				batch = append(batch, pipeline.Record{Key: string(key), Time: 1000, Fields: map[string]any{
					"id": id, "v": int64(i % 100), "payload": fmt.Sprintf("%024d", i) + payload}})
				if len(batch) == cap(batch) || i == keys-1 {
					if err := op.Process(batch, discard); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			out := io.Discard
			var n int64
			for b.Loop() {
				s, err := backend.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				if n, err = s.WriteTo(out); err != nil {
					b.Fatal(err)
				}
				s.Release()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
			b.ReportMetric(float64(n)/float64(keys), "B/key")
		})
	}
}

// BenchmarkCheckpointOverhead is the throughput a keyed window job loses
// to checkpoints every interval, on each backend. One job runs throughout,
// its checkpoints written to the bbolt checkpoint store in a temporary
// directory; each iteration measures a phase with checkpoints off (its
// store refuses to begin one, which costs the job nothing) and then a
// phase with them on, from the first trigger: the same process, heap and
// state on both sides, so that what drifts between separate runs weighs
// on both alike. off-records/s and on-records/s are the window step's
// input in each phase, overhead-% the throughput lost in the phase on
// against the phase off before it; checkpoint-s and state-MiB are of the
// last checkpoint completed in each phase on.
func BenchmarkCheckpointOverhead(b *testing.B) {
	eddyGC(b)
	size := ckptBenchSize()
	for _, name := range ckptBenchBackends {
		b.Run(name, func(b *testing.B) {
			plan := ckptBenchPlan(b, name, size.keys, size.interval)
			dir := b.TempDir()
			logger := slog.New(slog.DiscardHandler) // the refused checkpoints' warnings
			store, err := checkpoint.Open(dir, checkpoint.Options{Retain: 2, Logger: logger})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = store.Close(context.Background()) }()
			gate := &gateStore{inner: store, began: make(chan struct{}, 1)}
			mets := pipeline.NewMetrics()
			job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Logger: logger, Metrics: mets, Store: gate, StateDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			defer stopJob(b, job)
			in := windowRecords(mets)
			// Unmeasured: every key gets its state, then two checkpoints
			// grow the heap (snapshots) and the files as far as they go.
			awaitRecords(b, job, in, float64(size.keys))
			gate.openGate()
			waitBegan(b, job, gate)
			measure(b, job, in, 2*size.interval)

			var overhead, off, on, ckptSec, stateMiB float64
			for b.Loop() {
				gate.closeGate()
				awaitNoCheckpoint(b, job, mets)
				offRate := measure(b, job, in, size.phase)
				gate.openGate()
				waitBegan(b, job, gate)
				onRate := measure(b, job, in, size.phase)
				overhead += 100 * (1 - onRate/offRate)
				off += offRate
				on += onRate
				if c := mets.CheckpointStats().LatestCompleted; c != nil {
					ckptSec += float64(c.DurationMS) / 1000
					stateMiB += float64(c.StateBytes) / (1 << 20)
				}
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op") // two phases: not a measure
			b.ReportMetric(off/n, "off-records/s")
			b.ReportMetric(on/n, "on-records/s")
			b.ReportMetric(overhead/n, "overhead-%")
			b.ReportMetric(ckptSec/n, "checkpoint-s")
			b.ReportMetric(stateMiB/n, "state-MiB")
		})
	}
}

// measure returns the records/s that reach the window step over d.
func measure(b *testing.B, job *pipeline.Job, in func() float64, d time.Duration) float64 {
	b.Helper()
	t0, c0 := time.Now(), in()
	select {
	case <-job.Done():
		b.Fatalf("the job ended: %v", job.Wait())
	case <-time.After(d):
	}
	return (in() - c0) / time.Since(t0).Seconds()
}

// waitBegan waits for the first checkpoint begun since the gate opened.
func waitBegan(b *testing.B, job *pipeline.Job, gate *gateStore) {
	b.Helper()
	select {
	case <-job.Done():
		b.Fatalf("the job ended: %v", job.Wait())
	case <-gate.began:
	}
}

// awaitNoCheckpoint waits until no checkpoint is in progress.
func awaitNoCheckpoint(b *testing.B, job *pipeline.Job, mets *pipeline.Metrics) {
	b.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(mets.CheckpointStats().InProgress) > 0 {
		select {
		case <-job.Done():
			b.Fatalf("the job ended: %v", job.Wait())
		case <-tick.C:
		}
	}
}

// gateStore is a checkpoint store that begins checkpoints only while its
// gate is open; the checkpoints it begins are the inner store's own.
type gateStore struct {
	inner pipeline.CheckpointStore
	open  atomic.Bool
	// first is set by openGate and cleared by the first checkpoint begun
	// after it, which signals on began.
	first atomic.Bool
	began chan struct{}
}

var errGateClosed = errors.New("checkpoints are off in this phase")

func (s *gateStore) openGate() {
	s.first.Store(true)
	s.open.Store(true)
}

func (s *gateStore) closeGate() { s.open.Store(false) }

func (s *gateStore) Begin(id int64, meta checkpoint.Meta) (checkpoint.Writer, error) {
	if !s.open.Load() {
		return nil, errGateClosed
	}
	p, err := s.inner.Begin(id, meta)
	if err == nil && s.first.CompareAndSwap(true, false) {
		s.began <- struct{}{} // buffered: one send per openGate, each received
	}
	return p, err
}

// BenchmarkCheckpointRestore is a restart of the job on each backend from
// its latest checkpoint: open the checkpoint store, Latest (which reads
// and checks every byte of the checkpoint), then start the job from it
// until its window step processed its first record (the subtask read its
// state part and restored it into its backend; the source sought to its
// position). sec/op is the time of one restore; state-MiB the keyed state
// in the checkpoint.
func BenchmarkCheckpointRestore(b *testing.B) {
	eddyGC(b)
	size := ckptBenchSize()
	for _, name := range ckptBenchBackends {
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			logger := slog.New(slog.DiscardHandler)
			opts := checkpoint.Options{Retain: 2, Logger: logger}
			ckptBenchCheckpoint(b, ckptBenchPlan(b, name, size.keys, size.interval), size.keys, dir, opts)
			// No checkpoint while restoring.
			plan := ckptBenchPlan(b, name, size.keys, time.Hour)
			var stateMiB float64
			for b.Loop() {
				b.StopTimer()
				live, err := os.MkdirTemp(b.TempDir(), "live-")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				store, err := checkpoint.Open(dir, opts)
				if err != nil {
					b.Fatal(err)
				}
				cp, err := store.Latest(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				next := cp.ID() + 1
				mets := pipeline.NewMetrics()
				job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Logger: logger, Metrics: mets,
					Store: store, Restore: cp, FirstCheckpointID: next, StateDir: live})
				if err != nil {
					b.Fatal(err)
				}
				awaitRecords(b, job, windowRecords(mets), 1)
				b.StopTimer()
				stopJob(b, job)
				stateMiB = 0
				for _, p := range cp.Parts() {
					if strings.HasPrefix(p.Name, "op/") {
						stateMiB += float64(p.Size) / (1 << 20)
					}
				}
				if err := cp.Close(); err != nil {
					b.Fatal(err)
				}
				if err := store.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
				if err := os.RemoveAll(live); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(stateMiB, "state-MiB")
		})
	}
}

// ckptBenchCheckpoint runs plan with its checkpoints in dir until a
// checkpoint taken after each of its keys got its state completed.
func ckptBenchCheckpoint(b *testing.B, plan *pipeline.Plan, keys int, dir string, opts checkpoint.Options) {
	b.Helper()
	store, err := checkpoint.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := store.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}()
	mets := pipeline.NewMetrics()
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{Logger: opts.Logger, Metrics: mets,
		Store: store, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer stopJob(b, job)
	awaitRecords(b, job, windowRecords(mets), float64(keys))
	warm := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c := mets.CheckpointStats().LatestCompleted; c != nil && c.Triggered.After(warm) {
			return
		}
		select {
		case <-job.Done():
			b.Fatalf("the job ended: %v", job.Wait())
		case <-tick.C:
		}
	}
}
