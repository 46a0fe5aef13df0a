package agg

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/expr"
	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

func TestCBORRoundTrip(t *testing.T) {
	specs := mustSpecs(t, mergeSpecs+`
big: sum(b)
fs: sum(fl)
v: last(v)
vs: collect(v)
vd: count_distinct(v)
m: max(b)
`)
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600))
	values := []any{
		nil, true, "", "héllo", "\xff\xfe", 0, -1, int64(math.MinInt64), uint64(math.MaxUint64), 1.5, -0.0,
		math.Inf(-1), []byte{0, 1}, []any{1, "a", nil, []any{}}, map[string]any{"k": map[string]any{"n": 2.5}, "z": []any{}},
		when,
	}
	var records []rec
	for i, v := range values {
		records = append(records, rec{
			"x": i, "s": string(rune('a' + i%3)), "b": uint64(math.MaxUint64) - uint64(i), "fl": float64(i) / 3, "v": v,
		})
	}
	row := NewAccs(specs)
	var vm expr.VM
	for _, r := range records {
		require.NoError(t, row.Add(&vm, r))
	}
	data, err := row.MarshalCBOR()
	require.NoError(t, err)

	back := NewAccs(specs)
	require.NoError(t, back.UnmarshalCBOR(data))
	want, got := map[string]any{}, map[string]any{}
	row.Results(want)
	back.Results(got)

	// Values come back as CBOR tells them: ints as int, times in UTC offset form.
	// (collect skips the nil, so values[i] is at i-1.)
	wantVS := want["vs"].([]any)
	require.Equal(t, int64(math.MinInt64), wantVS[6])
	require.Equal(t, math.MinInt, got["vs"].([]any)[6])
	wantVS[6] = math.MinInt
	gotTime := got["vs"].([]any)[14].(time.Time)
	require.True(t, when.Equal(gotTime), "%v != %v", when, gotTime)
	wantVS[14], got["vs"].([]any)[14] = nil, nil
	gotLast := got["v"].(time.Time)
	require.True(t, when.Equal(gotLast))
	want["v"], got["v"] = nil, nil
	require.Equal(t, want, got)
	require.Equal(t, row.Count(), back.Count())

	// The encoding is deterministic, and the restored row goes on like the original.
	again, err := back.MarshalCBOR()
	require.NoError(t, err)
	require.Equal(t, data, again)
	require.NoError(t, row.Add(&vm, records[3]))
	require.NoError(t, back.Add(&vm, records[3]))
	row.Results(want)
	back.Results(got)
	require.Equal(t, want["d"], got["d"])
	require.Equal(t, want["vd"], got["vd"])
	require.Equal(t, want["fs"], got["fs"])
	require.Equal(t, want["big"], got["big"])
}

func TestCBOREmptyRow(t *testing.T) {
	specs := mustSpecs(t, mergeSpecs)
	data, err := NewAccs(specs).MarshalCBOR()
	require.NoError(t, err)
	back := NewAccs(specs)
	require.NoError(t, back.UnmarshalCBOR(data))
	want, got := map[string]any{}, map[string]any{}
	NewAccs(specs).Results(want)
	back.Results(got)
	require.Equal(t, want, got)
}

func TestCBORErrors(t *testing.T) {
	specs := mustSpecs(t, "n: count()\ns: sum(x)")
	row := NewAccs(specs)
	var vm expr.VM
	require.NoError(t, row.Add(&vm, rec{"x": 2}))
	data, err := row.MarshalCBOR()
	require.NoError(t, err)

	other := NewAccs(mustSpecs(t, "n: count()\ns: avg(x)"))
	require.ErrorIs(t, other.UnmarshalCBOR(data), ErrMismatch)
	require.ErrorIs(t, NewAccs(mustSpecs(t, "n: count()")).UnmarshalCBOR(data), ErrMismatch)

	target := NewAccs(specs)
	require.NoError(t, target.Add(&vm, rec{"x": 40}))
	for _, bad := range [][]byte{nil, {0xff}, data[:len(data)-1], mustCBOR(t, []any{2, 0}), mustCBOR(t, []any{1, 0, []any{1}, []any{2, 0}})} {
		require.Error(t, target.UnmarshalCBOR(bad))
	}
	out := map[string]any{}
	target.Results(out)
	require.Equal(t, map[string]any{"n": int64(1), "s": int64(40)}, out, "a failed decode changes nothing")

	col := NewAccs(mustSpecs(t, "c: collect(x)"))
	require.NoError(t, col.Add(&vm, rec{"x": func() {}}))
	_, err = col.MarshalCBOR()
	require.Error(t, err)
}

func mustCBOR(t *testing.T, v any) []byte {
	b, err := cbor.Marshal(v)
	require.NoError(t, err)
	return b
}

// Every truncation of a snapshot is an error, and no corruption panics.
func TestCBORCorrupt(t *testing.T) {
	specs := mustSpecs(t, mergeSpecs+"v: last(v)\nw: collect(v)\n")
	row := NewAccs(specs)
	var vm expr.VM
	for i, v := range []any{"a", map[string]any{"k": []any{1.5, "x"}}, uint64(math.MaxUint64), -7, time.Unix(5, 0)} {
		require.NoError(t, row.Add(&vm, rec{"x": i, "s": "s", "v": v}))
	}
	data, err := row.MarshalCBOR()
	require.NoError(t, err)
	for n := range len(data) {
		require.Error(t, NewAccs(specs).UnmarshalCBOR(data[:n]), "prefix of %d bytes", n)
	}
	require.Error(t, NewAccs(specs).UnmarshalCBOR(append(data, 0)), "trailing byte")
	for i := range data {
		for _, bit := range []byte{1, 0x20, 0x80} {
			bad := append([]byte(nil), data...)
			bad[i] ^= bit
			_ = NewAccs(specs).UnmarshalCBOR(bad) // must not panic
		}
	}
}

func FuzzUnmarshalCBOR(f *testing.F) {
	specs := mustSpecs(f, mergeSpecs)
	row := NewAccs(specs)
	var vm expr.VM
	for _, r := range randomRecords(rand.New(rand.NewPCG(5, 6)), 10) {
		require.NoError(f, row.Add(&vm, r))
	}
	data, err := row.MarshalCBOR()
	require.NoError(f, err)
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewAccs(specs)
		if r.UnmarshalCBOR(b) == nil {
			_, err := r.MarshalCBOR()
			require.NoError(t, err)
		}
	})
}

func TestHalfFloat(t *testing.T) {
	for h, want := range map[uint16]float64{
		0x0000: 0, 0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0001: 5.960464477539063e-08, 0x7c00: math.Inf(1), 0xfc00: math.Inf(-1),
	} {
		require.Equal(t, want, half(h), "%#x", h)
	}
	require.True(t, math.IsNaN(half(0x7e00)))
	// Floats written by other encoders in shorter forms decode too.
	d := decoder{b: []byte{0xf9, 0x3e, 0x00, 0xfa, 0x3f, 0xc0, 0x00, 0x00}}
	require.Equal(t, 1.5, d.float())
	require.Equal(t, 1.5, d.float())
	require.NoError(t, d.err)
}
