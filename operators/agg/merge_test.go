package agg

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// Every function, over a numeric field x and a string field s.
const mergeSpecs = `
n: count()
c: count(x)
s: sum(x)
a: avg(x)
lo: min(x)
hi: max(x)
slo: min(s)
shi: max(s)
f: first(x)
l: last(s)
ids: collect(x)
d: count_distinct(x)
ds: count_distinct(s)
p: 'reduce(x == nil ? acc : acc + x, 0, acc + other)'
q: reduce(concat(acc, [s]), [], concat(acc, other))
`

// randomRecords returns n records whose x is null, an int, or a float with
// few significant bits (so every sum of them is exact in any order) and
// whose s is null or a short string.
func randomRecords(rng *rand.Rand, n int) []rec {
	out := make([]rec, n)
	for i := range out {
		r := rec{}
		switch rng.IntN(6) {
		case 0:
			r["x"] = nil
		case 1, 2:
			r["x"] = rng.IntN(101) - 50
		case 3:
			r["x"] = int64(rng.IntN(7) - 3)
		default:
			r["x"] = float64(rng.IntN(401)-200) / 8
		}
		if rng.IntN(4) > 0 {
			r["s"] = string(rune('a' + rng.IntN(5)))
		}
		out[i] = r
	}
	return out
}

// combine merges rows (in order) with a random bracketing, through fresh rows.
func combine(t *testing.T, rng *rand.Rand, specs Specs, rows []*Row) *Row {
	out := NewAccs(specs)
	if len(rows) == 1 {
		require.NoError(t, out.Merge(rows[0]))
		return out
	}
	m := 1 + rng.IntN(len(rows)-1)
	require.NoError(t, out.Merge(combine(t, rng, specs, rows[:m])))
	require.NoError(t, out.Merge(combine(t, rng, specs, rows[m:])))
	return out
}

// randomPanes folds records into random contiguous panes, some of them
// empty, and round-trips some of the panes through a snapshot.
func randomPanes(t *testing.T, rng *rand.Rand, specs Specs, records []rec) []*Row {
	var vm expr.VM
	var panes []*Row
	rest := records
	for len(rest) > 0 || len(panes) == 0 {
		k := rng.IntN(min(len(rest), 8) + 1)
		pane := NewAccs(specs)
		for _, r := range rest[:k] {
			require.NoError(t, pane.Add(&vm, r))
		}
		rest = rest[k:]
		if rng.IntN(3) == 0 {
			data, err := pane.MarshalCBOR()
			require.NoError(t, err)
			pane = NewAccs(specs)
			require.NoError(t, pane.UnmarshalCBOR(data))
		}
		panes = append(panes, pane)
	}
	return panes
}

// Splitting the input into panes in any way, snapshotting some of them, and
// merging the panes in any bracketing gives what one row over all the input
// gives, for every function.
func TestMergeAssociative(t *testing.T) {
	specs := mustSpecs(t, mergeSpecs)
	require.NoError(t, specs.Mergeable())
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 500 {
		records := randomRecords(rng, rng.IntN(40))
		want := fold(t, specs, records...)

		panes := randomPanes(t, rng, specs, records)
		merged := combine(t, rng, specs, panes)
		got := map[string]any{}
		merged.Results(got)
		// Snapshots turn int64 values into int.
		pipeline.NormalizeDecoded(want)
		pipeline.NormalizeDecoded(got)
		require.Equal(t, want, got, "iteration %d, %d records in %d panes", iter, len(records), len(panes))
		require.Equal(t, int64(len(records)), merged.Count())
	}
}

// With arbitrary floats, sums differ from one pass at most by rounding.
func TestMergeFloatSums(t *testing.T) {
	specs := mustSpecs(t, "s: sum(x)\na: avg(x)")
	rng := rand.New(rand.NewPCG(3, 4))
	var vm expr.VM
	for range 200 {
		n := 1 + rng.IntN(100)
		records := make([]rec, n)
		for i := range records {
			records[i] = rec{"x": rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)))}
		}
		want := fold(t, specs, records...)
		var panes []*Row
		for i := 0; i < n; {
			k := 1 + rng.IntN(n-i)
			pane := NewAccs(specs)
			for _, r := range records[i : i+k] {
				require.NoError(t, pane.Add(&vm, r))
			}
			panes = append(panes, pane)
			i += k
		}
		got := map[string]any{}
		combine(t, rng, specs, panes).Results(got)
		for _, k := range []string{"s", "a"} {
			w, g := want[k].(float64), got[k].(float64)
			require.InDelta(t, w, g, 1e-12*math.Max(1, math.Abs(w)), fmt.Sprintf("%s over %d records", k, n))
		}
	}
}

// Clone copies a row exactly (its encoding, its results), for every
// function and a reduce without a merge expression, and the copy and the
// original change independently afterwards (copy-on-write relies on it).
// cloneSpecSets are the aggregations TestClone copies: every function
// together (a row whose accumulators are an allocation of their own), and
// runs of 1 to 4 of them (a row and its accumulators in one object).
func cloneSpecSets(t *testing.T) []Specs {
	lines := strings.Split(strings.TrimSpace(mergeSpecs+"r: reduce(concat(acc, [s]), [])\n"), "\n")
	sets := []Specs{mustSpecs(t, strings.Join(lines, "\n"))}
	for n := 1; n <= 4; n++ {
		for i := 0; i+n <= len(lines); i += n {
			sets = append(sets, mustSpecs(t, strings.Join(lines[i:i+n], "\n")))
		}
	}
	return sets
}

func TestClone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var vm expr.VM
	encode := func(r *Row) []byte {
		b, err := r.MarshalCBOR()
		require.NoError(t, err)
		return b
	}
	results := func(r *Row) map[string]any {
		m := map[string]any{}
		r.Results(m)
		return m
	}
	for _, specs := range cloneSpecSets(t) {
		for iter := range 40 {
			orig := NewAccs(specs)
			for _, r := range randomRecords(rng, rng.IntN(30)) {
				require.NoError(t, orig.Add(&vm, r))
			}
			origBytes, origResults := encode(orig), results(orig)
			c := orig.Clone()
			require.Equal(t, origBytes, encode(c), "%d aggregates, iteration %d", len(specs), iter)
			require.Equal(t, origResults, results(c), "%d aggregates, iteration %d", len(specs), iter)

			more := randomRecords(rng, 1+rng.IntN(10))
			for _, r := range more {
				require.NoError(t, c.Add(&vm, r))
			}
			require.Equal(t, origBytes, encode(orig), "%d aggregates, iteration %d: changing the copy changed the original", len(specs), iter)
			cloneBytes := encode(c)
			for _, r := range more {
				require.NoError(t, orig.Add(&vm, r))
			}
			require.Equal(t, cloneBytes, encode(c), "%d aggregates, iteration %d: changing the original changed the copy", len(specs), iter)
			require.Equal(t, cloneBytes, encode(orig), "%d aggregates, iteration %d: the same records, the same row", len(specs), iter)

			// Decoding into a row fills its accumulators where they are.
			_, d := NewAccsWith[[3]int64](specs)
			require.NoError(t, d.UnmarshalCBOR(cloneBytes))
			require.Equal(t, cloneBytes, encode(d), "%d aggregates, iteration %d: decoded", len(specs), iter)
		}
	}
}

// TestAccsWithOneObject: a holder, its row and up to four accumulators are
// one allocation, the copy too; more accumulators get one of their own.
func TestAccsWithOneObject(t *testing.T) {
	type holder struct {
		row *Row
		n   int64
	}
	lines := strings.Split(strings.TrimSpace(mergeSpecs), "\n")
	for n := 1; n <= 6; n++ {
		specs := mustSpecs(t, strings.Join(lines[:n], "\n"))
		want := 1.0
		if n > 4 {
			want = 2
		}
		var h *holder
		require.Equal(t, want, testing.AllocsPerRun(10, func() {
			var r *Row
			h, r = NewAccsWith[holder](specs)
			h.row = r
		}), "%d aggregates: NewAccsWith", n)
		require.Len(t, h.row.accs, n)
		require.Equal(t, want, testing.AllocsPerRun(10, func() {
			c, r := CloneWith[holder](h.row)
			c.row = r
		}), "%d aggregates: CloneWith", n)
	}
}

// TestHeldValuesOfMixedTypes: min, max, first and last of a field whose
// values are strings, integers, floats and nulls give what compare makes of
// the values themselves, folded in one row and merged from panes that went
// through snapshots; each row is also read back from its snapshot.
func TestHeldValuesOfMixedTypes(t *testing.T) {
	specs := mustSpecs(t, "lo: min(x)\nhi: max(x)\nf: first(x)\nl: last(x)")
	rng := rand.New(rand.NewPCG(5, 6))
	value := func() any {
		switch rng.IntN(5) {
		case 0:
			return nil
		case 1:
			return int64(rng.IntN(9) - 4)
		case 2:
			return float64(rng.IntN(17)-8) / 2
		}
		return strings.Repeat(string(rune('a'+rng.IntN(4))), 1+rng.IntN(3))
	}
	results := func(r *Row) map[string]any {
		m := map[string]any{}
		r.Results(m)
		pipeline.NormalizeDecoded(m) // snapshots turn int64 values into int
		return m
	}
	reread := func(r *Row) *Row {
		data, err := r.MarshalCBOR()
		require.NoError(t, err)
		back := NewAccs(specs)
		require.NoError(t, back.UnmarshalCBOR(data))
		return back
	}
	for iter := range 500 {
		records := make([]rec, rng.IntN(30))
		want := map[string]any{"lo": nil, "hi": nil, "f": nil, "l": nil}
		for i := range records {
			v := value()
			records[i] = rec{"x": v}
			if v == nil {
				continue
			}
			if want["f"] == nil {
				want["f"] = v
			}
			want["l"] = v
			if want["lo"] == nil || compare(v, want["lo"]) < 0 {
				want["lo"] = v
			}
			if want["hi"] == nil || compare(v, want["hi"]) > 0 {
				want["hi"] = v
			}
		}
		pipeline.NormalizeDecoded(want)

		var vm expr.VM
		one := NewAccs(specs)
		for _, r := range records {
			require.NoError(t, one.Add(&vm, r))
		}
		merged := combine(t, rng, specs, randomPanes(t, rng, specs, records))
		for name, r := range map[string]*Row{"one row": one, "merged panes": merged, "a clone": merged.Clone()} {
			require.Equal(t, want, results(r), "iteration %d: %s", iter, name)
			require.Equal(t, want, results(reread(r)), "iteration %d: %s, from its snapshot", iter, name)
		}
	}
}
