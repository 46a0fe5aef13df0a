package operators

import (
	"fmt"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/pipeline"
)

// BenchmarkWindowJoin drives an inner window join of 10s tumbling windows
// directly: 10,000 keys, batches of 1,024 records alternately of the left
// and the right side, event time in order at perKeySec records per key and
// second (both sides together), and a watermark after every batch
// (bounded out-of-orderness 1s). At 1 per key and second a key's window
// holds 5 records of each side: 25 rows per 10 records; at 10, 50 of each:
// 2,500 rows per 100. It reports events/s and rows/s.
func BenchmarkWindowJoin(b *testing.B) {
	for _, perKeySec := range []int{1, 10} {
		b.Run(fmt.Sprintf("%d_per_key_s", perKeySec), func(b *testing.B) { benchWindowJoin(b, perKeySec) })
	}
}

func benchWindowJoin(b *testing.B, perKeySec int) {
	const keys = 10000
	op, _ := openWindowBench(b, "join:\n      left: in\n      right: in\n      on: {left: id, right: id}\n"+
		"      window: {type: tumbling, size: 10s}\n      select: {id: left.id, l: left.v, r: right.v}")
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
			batch[j].Time = int64(i * 1000 / (keys * perKeySec))
			i++
		}
		if err := join.ProcessInput(side, batch, count); err != nil {
			b.Fatal(err)
		}
		side = 1 - side
		if err := wmh.OnWatermark(int64(i*1000/(keys*perKeySec))-1000-1, count); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*benchBatch), "ns/event")
}
