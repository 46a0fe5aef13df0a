package operators

import (
	"fmt"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
)

const benchBatch = 1024

// benchOp runs a step's operator over 1024-record batches. Each iteration
// restores the batch slice from a pristine copy (a copy of Record values, no
// allocation): operators compact their input in place. The field maps are the
// same in every iteration, so it measures the steady state: set overwrites
// fields it added in the first iteration, drop finds the field already gone.
func benchOp(b *testing.B, step string) {
	h := newHarness(b, stepYAML(step))
	pristine := make([]pipeline.Record, benchBatch)
	for i := range pristine {
		pristine[i] = pipeline.Record{
			Fields: map[string]any{"id": fmt.Sprintf("sensor-%d", i%16), "temp": float64(i % 100), "n": i},
			Time:   int64(i),
		}
	}
	batch := make([]pipeline.Record, benchBatch)
	discard := pipeline.EmitterFunc(func([]pipeline.Record) error { return nil })
	b.ReportAllocs()
	for b.Loop() {
		copy(batch, pristine)
		if err := h.op.Process(batch, discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/record")
}

func BenchmarkFilter(b *testing.B) { benchOp(b, `filter: temp > 50 && id != "sensor-3"`) }

// BenchmarkSet assigns a float (boxed by expr: one allocation per record) and
// a bool that reads it (no allocation).
func BenchmarkSet(b *testing.B) { benchOp(b, "set: {temp_c: (temp - 32) * 5 / 9, hot: temp_c > 30}") }

// BenchmarkSetBool assigns a bool (expr returns shared true/false values): no allocation.
func BenchmarkSetBool(b *testing.B) { benchOp(b, "set: {hot: temp > 30}") }

func BenchmarkMap(b *testing.B) { benchOp(b, "map: {id: id, temp: temp}") }

func BenchmarkDrop(b *testing.B) { benchOp(b, "drop: [n]") }

func BenchmarkFlatMap(b *testing.B) { benchOp(b, "flat_map: '[id, temp]'") }

func BenchmarkKeyBy(b *testing.B) { benchOp(b, "key_by: id") }
