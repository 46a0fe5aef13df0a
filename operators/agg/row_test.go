package agg

import (
	"math"
	"strings"
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/stretchr/testify/require"
)

type rec = map[string]any

// fold adds records to a new row of specs and returns its results.
func fold(t testing.TB, specs Specs, records ...rec) map[string]any {
	t.Helper()
	row := NewAccs(specs)
	var vm expr.VM
	for _, r := range records {
		require.NoError(t, row.Add(&vm, r))
	}
	out := map[string]any{}
	row.Results(out)
	return out
}

func xs(vals ...any) []rec {
	out := make([]rec, len(vals))
	for i, v := range vals {
		out[i] = rec{"x": v}
	}
	return out
}

func TestFunctions(t *testing.T) {
	const all = "n: count()\nc: count(x)\ns: sum(x)\na: avg(x)\nlo: min(x)\nhi: max(x)\nf: first(x)\nl: last(x)\nids: collect(x)\nd: count_distinct(x)"
	for _, tc := range []struct {
		name  string
		specs string
		in    []rec
		want  map[string]any
	}{
		{"no records", all, nil, map[string]any{
			"n": int64(0), "c": int64(0), "s": nil, "a": nil, "lo": nil, "hi": nil, "f": nil, "l": nil, "ids": []any{}, "d": int64(0)}},
		{"only nulls", all, append(xs(nil, nil), rec{}), map[string]any{
			"n": int64(3), "c": int64(0), "s": nil, "a": nil, "lo": nil, "hi": nil, "f": nil, "l": nil, "ids": []any{}, "d": int64(0)}},
		{"ints", all, xs(3, nil, int64(-1), 3, uint8(5)), map[string]any{
			"n": int64(5), "c": int64(4), "s": int64(10), "a": 2.5, "lo": int64(-1), "hi": uint8(5), "f": 3, "l": uint8(5),
			"ids": []any{3, int64(-1), 3, uint8(5)}, "d": int64(3)}},
		{"floats", all, xs(1.5, 2.0, nil, -0.5), map[string]any{
			"n": int64(4), "c": int64(3), "s": 3.0, "a": 1.0, "lo": -0.5, "hi": 2.0, "f": 1.5, "l": -0.5,
			"ids": []any{1.5, 2.0, -0.5}, "d": int64(3)}},
		{"ints and floats mix: float sum, numbers compare by value", "s: sum(x)\na: avg(x)\nlo: min(x)\nhi: max(x)\nd: count_distinct(x)",
			xs(2, 2.0, 1.5, int64(2), float32(0.5)), map[string]any{"s": 8.0, "a": 1.6, "lo": float32(0.5), "hi": 2, "d": int64(3)}},
		{"ties keep the earliest", "lo: min(x)\nhi: max(x)", xs(2.0, 2, 1, 1.0), map[string]any{"lo": 1, "hi": 2.0}},
		{"strings order after numbers", "lo: min(x)\nhi: max(x)\nd: count_distinct(x)", xs("b", 10, "a", -3.5, "b"),
			map[string]any{"lo": -3.5, "hi": "b", "d": int64(4)}},
		{"exact int/float compare", "lo: min(x)\nhi: max(x)", xs(math.MaxInt64, 9.223372036854775807e18, math.MinInt64, -9.223372036854775808e18),
			map[string]any{"lo": math.MinInt64, "hi": 9.223372036854775807e18}},
		{"NaN is the largest number", "lo: min(x)\nhi: max(x)\ns: sum(x)", xs(1.0, math.NaN(), math.Inf(1)),
			map[string]any{"lo": 1.0, "hi": math.NaN(), "s": math.NaN()}},
		{"infinities sum", "s: sum(x)\na: avg(x)", xs(1.0, math.Inf(1), 2), map[string]any{"s": math.Inf(1), "a": math.Inf(1)}},
		{"int sum beyond int64 is float", "s: sum(x)", xs(math.MaxInt64, 1, uint64(math.MaxUint64)),
			map[string]any{"s": 2.7670116110564327e19}},
		{"int sum back in range stays int", "s: sum(x)", xs(math.MaxInt64, 10, -20, math.MinInt64),
			map[string]any{"s": int64(-11)}},
		{"big uints compare", "lo: min(x)\nhi: max(x)", xs(uint64(math.MaxUint64), 1.8446744073709552e19, uint64(1<<63)),
			map[string]any{"lo": uint64(1 << 63), "hi": 1.8446744073709552e19}},
		{"compensated float sum", "s: sum(x)", xs(1e16, 1.0, -1e16, 1.0), map[string]any{"s": 2.0}},
		{"expressions", "m: max(x * 2)\nn: 'count(x > 1 ? x : nil)'\nd: count_distinct(x % 2)", xs(1, 2, 3),
			map[string]any{"m": 6, "n": int64(2), "d": int64(2)}},
		{"count_distinct compares by value", "d: count_distinct(x)",
			xs(3, 3.0, int64(3), "3", true, []any{1, "a"}, []any{1.0, "a"}, map[string]any{"a": 1, "b": nil}, map[string]any{"b": nil, "a": 1.0}, []string{"1", "a"}, []any{"1", "a"}),
			map[string]any{"d": int64(6)}},
		{"collect keeps any value", "c: collect(x)", xs(map[string]any{"a": 1}, []any{nil}, false),
			map[string]any{"c": []any{map[string]any{"a": 1}, []any{nil}, false}}},
		{"missing field is null", "c: count(y)\ns: sum(y)", xs(1, 2), map[string]any{"c": int64(0), "s": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fold(t, mustSpecs(t, tc.specs), tc.in...)
			for k, w := range tc.want {
				if f, ok := w.(float64); ok && math.IsNaN(f) {
					require.True(t, math.IsNaN(got[k].(float64)), k)
					delete(got, k)
					delete(tc.want, k)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestInputErrors(t *testing.T) {
	for _, tc := range []struct {
		specs string
		in    rec
		want  string
	}{
		{"s: sum(x)", rec{"x": "12"}, `bad aggregate input: aggregate s: sum(x) got string "12", want a number (convert with to_float or to_int)`},
		{"a: avg(x)", rec{"x": true}, `bad aggregate input: aggregate a: avg(x) got bool true, want a number (convert with to_float or to_int)`},
		{"m: max(x)", rec{"x": []any{1}}, `bad aggregate input: aggregate m: max(x) got list [1], want a number or a string`},
		{"m: min(x)", rec{"x": false}, `bad aggregate input: aggregate m: min(x) got bool false, want a number or a string`},
		{"d: count_distinct(x)", rec{"x": func() {}}, `bad aggregate input: aggregate d: count_distinct(x) got func()`},
		{"m: max(x.y)", rec{"x": 1}, `aggregate m: max(x.y): cannot fetch y from int`},
		{"p: reduce(acc + x, 0)", rec{"x": "a"}, `aggregate p: reduce(acc + x, 0): invalid operation: int + string`},
	} {
		t.Run(tc.specs, func(t *testing.T) {
			row := NewAccs(mustSpecs(t, tc.specs))
			err := row.Add(new(expr.VM), tc.in)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// A failing record changes nothing, not even the aggregates before it.
func TestAddIsAtomic(t *testing.T) {
	specs := mustSpecs(t, "n: count()\nc: collect(x)\nd: count_distinct(x)\np: reduce(acc + x, 0)\ns: sum(x)")
	row := NewAccs(specs)
	var vm expr.VM
	require.NoError(t, row.Add(&vm, rec{"x": 1}))
	require.Error(t, row.Add(&vm, rec{"x": "one"}))
	require.Error(t, row.Add(&vm, rec{"x": []any{1}}))
	out := map[string]any{}
	row.Results(out)
	require.Equal(t, map[string]any{"n": int64(1), "c": []any{1}, "d": int64(1), "p": 1, "s": int64(1)}, out)
	require.Equal(t, int64(1), row.Count())
}

func TestNotCompiled(t *testing.T) {
	specs, err := parse(t, "n: count()")
	require.NoError(t, err)
	row := NewAccs(specs)
	require.ErrorIs(t, row.Add(new(expr.VM), rec{}), ErrNotCompiled)
	_, err = row.MarshalCBOR()
	require.ErrorIs(t, err, ErrNotCompiled)
}

func TestReduce(t *testing.T) {
	for _, tc := range []struct {
		name, specs string
		in          []rec
		want        any
	}{
		{"product", "p: reduce(acc * x, 1)", xs(2, 3, 4), 24},
		{"init without records", "p: reduce(acc * x, 1)", nil, 1},
		{"init is any constant expression", `p: "reduce(acc + x, len('abc'))"`, xs(1), 4},
		{"null inputs are the step's business", "p: 'reduce(x == nil ? acc : acc + x, 0)'", xs(1, nil, 2), 3},
		{"a nil result becomes the accumulator", "p: reduce(x, 0)", xs(1, nil), nil},
		{"list accumulator", "p: reduce(concat(acc, [x]), [])", xs("a", "b"), []any{"a", "b"}},
		{"map accumulator", "p: 'reduce(merge(acc, {(k): v}), {})'", []rec{{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}},
			map[string]any{"a": 3, "b": 2}},
		{"several fields", "p: reduce(acc + a * b, 0)", []rec{{"a": 2, "b": 3}, {"a": 4, "b": 5}}, 26},
		{"acc shadows a field named acc", "p: reduce(acc + 1, 0)", []rec{{"acc": 100}, {"acc": 100}}, 2},
		{"$env sees every field and acc", "p: reduce(acc + len($env), 0)", []rec{{"a": 1}, {"a": 1, "b": 2}}, 2 + 3},
		{"max by another field", "p: 'reduce(acc == nil || t > acc.t ? {t: t, id: id} : acc, nil)'",
			[]rec{{"t": 5, "id": "a"}, {"t": 9, "id": "b"}, {"t": 7, "id": "c"}}, map[string]any{"t": 9, "id": "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fold(t, mustSpecs(t, tc.specs), tc.in...)
			require.Equal(t, tc.want, got["p"])
		})
	}
}

func TestReduceDoesNotTouchRecord(t *testing.T) {
	specs := mustSpecs(t, "p: reduce(acc + x, 0)\nq: reduce(acc + len($env), 0)")
	r := rec{"x": 1, "acc": "mine"}
	fold(t, specs, r)
	require.Equal(t, rec{"x": 1, "acc": "mine"}, r)
}

func TestReduceMerge(t *testing.T) {
	specs := mustSpecs(t, "p: reduce(acc * x, 1, acc * other)\nl: reduce(concat(acc, [x]), [], concat(acc, other))")
	var vm expr.VM
	a, b, empty := NewAccs(specs), NewAccs(specs), NewAccs(specs)
	for _, x := range []int{2, 3} {
		require.NoError(t, a.Add(&vm, rec{"x": x}))
	}
	require.NoError(t, b.Add(&vm, rec{"x": 5}))
	require.NoError(t, a.Merge(empty))
	require.NoError(t, empty.Merge(a))
	require.NoError(t, empty.Merge(b))
	out := map[string]any{}
	empty.Results(out)
	require.Equal(t, map[string]any{"p": 30, "l": []any{2, 3, 5}}, out)

	noMerge := mustSpecs(t, "p: reduce(acc * x, 1)")
	require.ErrorIs(t, NewAccs(noMerge).Merge(NewAccs(noMerge)), ErrNotMergeable)

	bad := mustSpecs(t, "p: reduce(x, 1, acc + other)")
	c, d := NewAccs(bad), NewAccs(bad)
	require.NoError(t, c.Add(&vm, rec{"x": 1}))
	require.NoError(t, d.Add(&vm, rec{"x": "s"}))
	require.ErrorContains(t, c.Merge(d), "aggregate p: merge of reduce(x, 1, acc + other): invalid operation: int + string")
}

func TestRetract(t *testing.T) {
	specs := mustSpecs(t, "n: count()\nc: count(x)\ns: sum(x)\na: avg(x)\nids: collect(x)\nd: count_distinct(x)")
	var vm expr.VM
	row := NewAccs(specs)
	results := func() map[string]any {
		out := map[string]any{}
		row.Results(out)
		return out
	}
	for _, r := range xs(1, 2.5, nil, 1, "x") {
		if _, ok := r["x"].(string); ok {
			require.ErrorIs(t, row.Add(&vm, r), ErrBadInput)
			continue
		}
		require.NoError(t, row.Add(&vm, r))
	}
	require.Equal(t, map[string]any{"n": int64(4), "c": int64(3), "s": 4.5, "a": 1.5, "ids": []any{1, 2.5, 1}, "d": int64(2)}, results())

	require.NoError(t, row.Retract(&vm, rec{"x": 2.5}))
	require.Equal(t, map[string]any{"n": int64(3), "c": int64(2), "s": int64(2), "a": 1.0, "ids": []any{1, 1}, "d": int64(1)}, results(),
		"with the float gone the sum is an int again")
	require.NoError(t, row.Retract(&vm, rec{"x": 1}))
	require.NoError(t, row.Retract(&vm, rec{}))
	require.Equal(t, map[string]any{"n": int64(1), "c": int64(1), "s": int64(1), "a": 1.0, "ids": []any{1}, "d": int64(1)}, results())

	require.ErrorIs(t, row.Retract(&vm, rec{"x": 7}), ErrRetractMissing)
	require.NoError(t, row.Retract(&vm, rec{"x": 1}))
	require.Equal(t, map[string]any{"n": int64(0), "c": int64(0), "s": nil, "a": nil, "ids": []any{}, "d": int64(0)}, results())
	require.Equal(t, int64(0), row.Count())

	// Float residue vanishes once the floats are gone.
	fs := mustSpecs(t, "s: sum(x)")
	row2 := NewAccs(fs)
	for _, x := range []any{0.1, 0.2, 3, 0.7} {
		require.NoError(t, row2.Add(&vm, rec{"x": x}))
	}
	for _, x := range []any{0.2, 0.7, 0.1} {
		require.NoError(t, row2.Retract(&vm, rec{"x": x}))
	}
	out := map[string]any{}
	row2.Results(out)
	require.Equal(t, int64(3), out["s"])

	// collect removes the earliest value equal to the retracted one.
	cs := NewAccs(mustSpecs(t, "c: collect(x)"))
	for _, x := range []any{"a", 1, map[string]any{"k": []any{1}}, 1.0, "a"} {
		require.NoError(t, cs.Add(&vm, rec{"x": x}))
	}
	require.NoError(t, cs.Retract(&vm, rec{"x": 1.0}))
	require.NoError(t, cs.Retract(&vm, rec{"x": map[string]any{"k": []any{1.0}}}))
	require.NoError(t, cs.Retract(&vm, rec{"x": "a"}))
	out = map[string]any{}
	cs.Results(out)
	require.Equal(t, []any{1.0, "a"}, out["c"])

	// count_distinct keeps multiplicities, so a retraction before its add
	// cancels out.
	ds := mustSpecs(t, "d: count_distinct(x)")
	row3 := NewAccs(ds)
	require.NoError(t, row3.Retract(&vm, rec{"x": "a"}))
	require.NoError(t, row3.Add(&vm, rec{"x": "b"}))
	out = map[string]any{}
	row3.Results(out)
	require.Equal(t, int64(1), out["d"])
	require.NoError(t, row3.Add(&vm, rec{"x": "a"}))
	row3.Results(out)
	require.Equal(t, int64(1), out["d"])
	require.NoError(t, row3.Add(&vm, rec{"x": "a"}))
	row3.Results(out)
	require.Equal(t, int64(2), out["d"])
}

func TestRetractUnsupported(t *testing.T) {
	for _, s := range []string{"m: min(x)", "m: max(x)", "m: first(x)", "m: last(x)", "m: reduce(acc + x, 0, acc + other)"} {
		specs := mustSpecs(t, "n: count()\n"+s)
		row := NewAccs(specs)
		var vm expr.VM
		require.NoError(t, row.Add(&vm, rec{"x": 1}))
		require.ErrorIs(t, row.Retract(&vm, rec{"x": 1}), ErrNotRetractable, s)
		require.Equal(t, int64(1), row.Count())
	}
}

func TestMergeOrderAndMismatch(t *testing.T) {
	specs := mustSpecs(t, "f: first(x)\nl: last(x)\nc: collect(x)")
	var vm expr.VM
	early, late := NewAccs(specs), NewAccs(specs)
	require.NoError(t, early.Add(&vm, rec{"x": 1}))
	require.NoError(t, early.Add(&vm, rec{"x": 2}))
	require.NoError(t, late.Add(&vm, rec{"x": 3}))
	require.NoError(t, late.Add(&vm, rec{"x": nil}))
	require.NoError(t, early.Merge(late))
	out := map[string]any{}
	early.Results(out)
	require.Equal(t, map[string]any{"f": 1, "l": 3, "c": []any{1, 2, 3}}, out)

	// The merged row shares nothing with the other.
	require.NoError(t, late.Add(&vm, rec{"x": 4}))
	early.Results(out)
	require.Equal(t, []any{1, 2, 3}, out["c"])
	// Nor do results with the row.
	res := out["c"].([]any)
	require.NoError(t, early.Add(&vm, rec{"x": 9}))
	require.Equal(t, []any{1, 2, 3}, res)

	require.ErrorIs(t, early.Merge(early), ErrMismatch)
	require.ErrorIs(t, early.Merge(NewAccs(mustSpecs(t, "f: first(x)"))), ErrMismatch)
	require.ErrorIs(t, early.Merge(NewAccs(mustSpecs(t, "f: first(x)\nl: last(x)\nc: count(x)"))), ErrMismatch)
}

func TestReset(t *testing.T) {
	specs := mustSpecs(t, "n: count()\nc: collect(x)\nd: count_distinct(x)\np: reduce(acc + x, 10)")
	row := NewAccs(specs)
	var vm expr.VM
	require.NoError(t, row.Add(&vm, rec{"x": 1}))
	row.Reset()
	out := map[string]any{}
	row.Results(out)
	require.Equal(t, map[string]any{"n": int64(0), "c": []any{}, "d": int64(0), "p": 10}, out)
	require.Equal(t, int64(0), row.Count())
}

func TestManyAggregates(t *testing.T) {
	text := ""
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		text += n + ": sum(x)\n"
	}
	out := fold(t, mustSpecs(t, text), xs(1, 2)...)
	require.Len(t, out, 10)
	require.Equal(t, int64(3), out["j"])
}

func TestInt128Float(t *testing.T) {
	for _, tc := range []struct {
		a    int128
		want float64
	}{
		{int128{0, 5}, 5},
		{int128{-1, math.MaxUint64}, -1},
		{int128{0, 1 << 63}, 9.223372036854775808e18},
		{int128{1, 0}, 1.8446744073709552e19},
		{int128{1, 1}, 1.8446744073709552e19},
		{int128{-1, 1 << 63}, -9.223372036854775808e18},
		{int128{-2, 0}, -3.6893488147419103e19},
		{int128{math.MinInt64, 0}, -1.7014118346046923e38},
		{int128{math.MaxInt64, math.MaxUint64}, 1.7014118346046923e38},
		// Round half to even at the 53-bit boundary: 2^64 + 2^11 is a tie.
		{int128{1, 1 << 11}, 1.8446744073709552e19},
		{int128{1, 1<<11 + 1}, 1.8446744073709556e19},
	} {
		require.Equal(t, tc.want, tc.a.float(), "%+v", tc.a)
	}
}

// TestPrefetchHeld: PrefetchHeld, at both levels, on a nil row, an empty
// one and one holding strings and other values, changes nothing the row
// encodes.
func TestPrefetchHeld(t *testing.T) {
	r := NewAccs(mustSpecs(t, "n: count()\nl: last(s)\nf: first(x)\nm: min(s)"))
	var vm expr.VM
	prefetchAll := func() {
		for level := range 2 {
			(*Row)(nil).PrefetchHeld(level)
			r.PrefetchHeld(level)
		}
	}
	prefetchAll()
	require.NoError(t, r.Add(&vm, rec{"s": strings.Repeat("\x01", 3000), "x": 5}))
	want, err := r.AppendCBOR(nil)
	require.NoError(t, err)
	prefetchAll()
	got, err := r.AppendCBOR(nil)
	require.NoError(t, err)
	require.Equal(t, want, got)
}
