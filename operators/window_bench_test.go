package operators

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	_ "github.com/eddy-stream/eddy/connectors/all" // generator and blackhole, for the pipeline benchmark
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// openWindowBench opens the operator of step body as subtask 0 of 1 (max
// parallelism 128) on a memory backend, which it returns too; the
// operator is closed when the benchmark ends.
func openWindowBench(b *testing.B, body string) (pipeline.Operator, *statestore.Memory) {
	return openWindowBenchWith(b, body, false)
}

// openWindowBenchWith is openWindowBench, with incremental checkpoints or
// without.
func openWindowBenchWith(b *testing.B, body string, incremental bool) (pipeline.Operator, *statestore.Memory) {
	b.Helper()
	backend, err := statestore.NewMemory(statestore.Options{
		KeyGroup: func(key string) int { return pipeline.KeyGroup(key, 128) }, KeyGroups: [2]int{0, 128},
		Incremental: incremental,
	})
	if err != nil {
		b.Fatal(err)
	}
	op := openWindowOn(b, body, backend)
	b.Cleanup(func() { _ = op.Close() })
	return op, backend
}

// openWindowOn opens the operator of step body (one subtask of 128 key
// groups) on backend; the caller closes it.
func openWindowOn(b *testing.B, body string, backend statestore.Backend) pipeline.Operator {
	b.Helper()
	spec, err := loadSteps(stepYAML(body))
	if err != nil {
		b.Fatal(err)
	}
	op, err := spec.Steps[0].Config.NewOperator()
	if err != nil {
		b.Fatal(err)
	}
	info := pipeline.SubtaskInfo{ID: "s", Parallelism: 1, MaxParallelism: 128, Logger: slog.Default(), Metrics: pipeline.NewMetrics()}
	oc := &pipeline.OperatorContext{SubtaskInfo: info, KeyedState: func() (statestore.Backend, error) { return backend, nil }}
	if err := op.Open(context.Background(), oc); err != nil {
		b.Fatal(err)
	}
	return op
}

// benchWindow drives the window operator of step (a key_by on id with
// window keys) directly: batches of 1024 records of 10,000 keys, perKeySec
// records per key and second of event time in order, a watermark after
// every batch (bounded out-of-orderness 1s). It reports events/s.
func benchWindow(b *testing.B, window string, perKeySec int) {
	const keys = 10000
	op, _ := openWindowBench(b, "key_by: id\n    "+window+"\n    aggregate:\n      n: count()\n      avg_v: avg(v)")
	wmh := op.(pipeline.WatermarkHandler)
	// One record per key, reused: the operator only reads their fields.
	pristine := make([]pipeline.Record, keys)
	for i := range pristine {
		id := fmt.Sprintf("sensor-%d", i)
		key, _ := pipeline.EncodeKey(nil, id)
		pristine[i] = pipeline.Record{Fields: map[string]any{"id": id, "v": float64(i % 100)}, Key: string(key)}
	}
	batch := make([]pipeline.Record, benchBatch)
	discard := pipeline.EmitterFunc(func([]pipeline.Record) error { return nil })
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		for j := range batch {
			batch[j] = pristine[i%keys]
			batch[j].Time = int64(i * 1000 / (keys * perKeySec))
			i++
		}
		if err := op.Process(batch, discard); err != nil {
			b.Fatal(err)
		}
		if err := wmh.OnWatermark(int64(i*1000/(keys*perKeySec))-1000-1, discard); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*benchBatch), "ns/event")
}

// benchRates runs a window benchmark at 100 records per key and second of
// event time (1,000 per key and 10s window) and at 1 (10 per window: the
// firing cost shows).
func benchRates(b *testing.B, window string) {
	for _, perKeySec := range []int{100, 1} {
		b.Run(fmt.Sprintf("%d_per_key_s", perKeySec), func(b *testing.B) { benchWindow(b, window, perKeySec) })
	}
}

// BenchmarkTumblingCountAvg10kKeys: 10s tumbling windows, count + avg.
func BenchmarkTumblingCountAvg10kKeys(b *testing.B) {
	benchRates(b, "window: {type: tumbling, size: 10s}")
}

// BenchmarkSliding10s2s: 10s windows every 2s (panes of 2s), count + avg.
func BenchmarkSliding10s2s(b *testing.B) {
	benchRates(b, "window: {type: sliding, size: 10s, slide: 2s}")
}

// BenchmarkSession10kKeys: sessions with a gap of 1s (100 per key and s:
// records 10ms apart, one long session; 1 per key and s: a session each).
func BenchmarkSession10kKeys(b *testing.B) {
	benchRates(b, "window: {type: session, gap: 1s}")
}

// BenchmarkWindowPipeline10M runs a whole pipeline through a pipeline.Runner:
// a generator of 10M events (10,000 keys, 1,000 events per ms of event
// time), a 10s tumbling count + avg per key at parallelism 1, a blackhole
// sink. It measures the runtime (generator expressions, batching, hash
// partitioning) as well as the window.
func BenchmarkWindowPipeline10M(b *testing.B) {
	const events = 10_000_000
	spec, err := pipeline.Load(pipeline.Default, "bench.yaml", []byte(fmt.Sprintf(`version: 1
name: window-bench
sources:
  - id: gen
    type: generator
    count: %d
    fields:
      id: i %% 10000
      v: i %% 100
      ts: i / 1000
    event_time: ts
steps:
  - id: per_key
    key_by: id
    window: {type: tumbling, size: 10s}
    aggregate:
      n: count()
      avg_v: avg(v)
sinks:
  - id: out
    type: blackhole
`, events)))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for b.Loop() {
		r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
		if err == nil {
			err = r.Run(context.Background())
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*events/time.Since(start).Seconds(), "events/s")
}
