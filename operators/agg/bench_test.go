package agg

import (
	"fmt"
	"strings"
	"testing"

	"github.com/eddy-stream/eddy/expr"
)

func benchRecords(n int) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{
			"id": fmt.Sprintf("sensor-%d", i%100), "temp": 50 + float64(i%700)/10, "n": i % 1000, "ts": 1700000000000 + int64(i),
		}
	}
	return out
}

func benchAdd(b *testing.B, text string) {
	specs := mustSpecs(b, text)
	records := benchRecords(1024)
	row := NewAccs(specs)
	var vm expr.VM
	// Warm up: pools, maps and lists reach their steady size.
	for _, r := range records {
		if err := row.Add(&vm, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := row.Add(&vm, records[i&1023]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRowAdd is the window hot path: count and avg over a field.
func BenchmarkRowAdd(b *testing.B) { benchAdd(b, "n: count()\navg_c: avg(temp)") }

func BenchmarkRowAddNumeric(b *testing.B) {
	benchAdd(b, "n: count()\nc: count(temp)\ns: sum(n)\na: avg(temp)\nlo: min(temp)\nhi: max(temp)\nf: first(id)\nl: last(id)")
}

func BenchmarkRowAddExpr(b *testing.B) { benchAdd(b, "m: max(temp * 2)") }

func BenchmarkRowAddCountDistinct(b *testing.B) { benchAdd(b, "d: count_distinct(id)") }

func BenchmarkRowAddReduce(b *testing.B) { benchAdd(b, "p: reduce(acc + n, 0, acc + other)") }

func BenchmarkRowMerge(b *testing.B) {
	specs := mustSpecs(b, "n: count()\ns: sum(n)\na: avg(temp)\nlo: min(temp)\nhi: max(temp)")
	var vm expr.VM
	pane := NewAccs(specs)
	for _, r := range benchRecords(100) {
		if err := pane.Add(&vm, r); err != nil {
			b.Fatal(err)
		}
	}
	win := NewAccs(specs)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := win.Merge(pane); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRowCBOR(b *testing.B) {
	specs := mustSpecs(b, "n: count()\ns: sum(n)\na: avg(temp)\nlo: min(temp)\nhi: max(temp)\nl: last(id)")
	var vm expr.VM
	row := NewAccs(specs)
	for _, r := range benchRecords(100) {
		if err := row.Add(&vm, r); err != nil {
			b.Fatal(err)
		}
	}
	back := NewAccs(specs)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		data, err := row.MarshalCBOR()
		if err != nil {
			b.Fatal(err)
		}
		if err := back.UnmarshalCBOR(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRowCopy is the copy-on-write of a window's row (count, avg and
// the last 1 KiB payload, as in BenchmarkCheckpointOverhead): "clone" is Clone,
// "merge" the empty row plus Merge that copied rows before.
//
//	go test -run XXX -bench RowCopy -benchmem ./operators/agg/
func BenchmarkRowCopy(b *testing.B) {
	specs := mustSpecs(b, "n: count()\navg_v: avg(v)\nlast: last(payload)")
	var vm expr.VM
	r := NewAccs(specs)
	if err := r.Add(&vm, rec{"v": 42, "payload": strings.Repeat("x", 1024)}); err != nil {
		b.Fatal(err)
	}
	b.Run("clone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = r.Clone()
		}
	})
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := NewAccs(specs)
			if err := c.Merge(r); err != nil {
				b.Fatal(err)
			}
			sink = c
		}
	})
}

var sink *Row

// BenchmarkRowResults is what a continuous aggregate does for each record it
// emits: a row's results into a reused map. A string that min, max, first
// or last hold is returned as the interface it came in, so neither case
// allocates.
func BenchmarkRowResults(b *testing.B) {
	for _, text := range []string{"n: count()\nhi: max(temp)", "n: count()\nhi: max(temp)\nl: last(id)"} {
		specs := mustSpecs(b, text)
		row := NewAccs(specs)
		var vm expr.VM
		for _, r := range benchRecords(100) {
			if err := row.Add(&vm, r); err != nil {
				b.Fatal(err)
			}
		}
		out := map[string]any{}
		b.Run(fmt.Sprintf("aggregates=%d", len(specs)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				row.Results(out)
			}
		})
	}
}
