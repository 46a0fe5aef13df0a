package operators

import (
	"fmt"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/pipeline"
)

// BenchmarkWindowJoin drives an inner window join of 10s tumbling windows
// directly: 10,000 keys, batches of 1,024 records alternately of the left
// and the right side, event time in order at perWindow records per key and
// window (both sides together), and a watermark after every batch
// (bounded out-of-orderness 1s). At 10 per key and window a key's window
// holds about 5 records of each side: 25 rows per 10 records; at 2 its
// two records are of both sides about half the time (one row per 4
// records), and the cost of holding records and timers shows. The rows are built by a
// select of three fields, or, in the no_select runs, by merging the two
// records' fields. It reports events/s and rows/s.
func BenchmarkWindowJoin(b *testing.B) {
	for _, perWindow := range []int{10, 2} {
		for _, sel := range []string{"select", "no_select"} {
			b.Run(fmt.Sprintf("%d_per_key_window/%s", perWindow, sel), func(b *testing.B) { benchWindowJoin(b, perWindow, sel == "select") })
		}
	}
}

func benchWindowJoin(b *testing.B, perWindow int, sel bool) {
	const keys, window = 10000, 10000
	step := "join:\n      left: in\n      right: in\n      on: {left: id, right: id}\n      window: {type: tumbling, size: 10s}"
	if sel {
		step += "\n      select: {id: left.id, l: left.v, r: right.v}"
	}
	op, _ := openWindowBench(b, step)
	join := op.(pipeline.MultiInputOperator)
	wmh := op.(pipeline.WatermarkHandler)
	// One record per key, reused: the join holds their fields, never
	// changes them.
	pristine := make([]pipeline.Record, keys)
	for i := range pristine {
		id := fmt.Sprintf("auction-%d", i)
		key, _ := pipeline.EncodeKey(nil, id)
		pristine[i] = pipeline.Record{Fields: map[string]any{"id": id, "v": float64(i % 100)}, Key: string(key)}
	}
	batch := make([]pipeline.Record, benchBatch)
	rows := 0
	count := pipeline.EmitterFunc(func(out []pipeline.Record) error { rows += len(out); return nil })
	i, side := 0, sideLeft
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		for j := range batch {
			batch[j] = pristine[i%keys]
			batch[j].Time = int64(i * window / (keys * perWindow))
			i++
		}
		if err := join.ProcessInput(side, batch, count); err != nil {
			b.Fatal(err)
		}
		side = 1 - side
		if err := wmh.OnWatermark(int64(i*window/(keys*perWindow))-1000-1, count); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*benchBatch), "ns/event")
}
