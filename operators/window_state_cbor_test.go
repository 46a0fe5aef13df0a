package operators

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// boxWire describes accBox's snapshot encoding, [row, maxTime], to the
// cbor package: the reference its hand encoding is compared with.
type boxWire struct {
	_       struct{} `cbor:",toarray"`
	Row     cbor.RawMessage
	MaxTime int64
}

// accBox's one-pass encoding (MarshalCBOR, and AppendCBOR after what the
// buffer holds) is byte for byte what the cbor package makes of boxWire,
// and decodes back.
func TestAccBoxEncoding(t *testing.T) {
	raw, err := cbor.Marshal([]any{1, "x", []int{2, 3}})
	require.NoError(t, err)
	for _, mt := range []int64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1700000000123,
		math.MaxInt64, -1, -24, -25, -256, -257, -65537, -1 << 40, math.MinInt64} {
		b := &accBox{raw: raw, maxTime: mt}
		got, err := b.MarshalCBOR()
		require.NoError(t, err)
		want, err := cbor.Marshal(boxWire{Row: raw, MaxTime: mt})
		require.NoError(t, err)
		require.Equal(t, want, got, "maxTime %d", mt)
		appended, err := b.AppendCBOR([]byte("prefix"))
		require.NoError(t, err)
		require.Equal(t, append([]byte("prefix"), want...), appended, "AppendCBOR, maxTime %d", mt)
		var back accBox
		require.NoError(t, back.UnmarshalCBOR(got))
		require.Equal(t, mt, back.maxTime)
		require.Equal(t, []byte(raw), []byte(back.raw))
	}
}

// TestPrefetchHeldNil: the snapshot encoder calls PrefetchHeld on nil
// values too, and on boxes and rows that hold a restored encoding instead
// of a row, at both levels; it changes nothing.
func TestPrefetchHeldNil(t *testing.T) {
	raw := &accBox{raw: []byte{1, 2, 3}}
	for level := range 2 {
		require.NotPanics(t, func() {
			(*accBox)(nil).PrefetchHeld(level)
			(*aggRow)(nil).PrefetchHeld(level)
			raw.PrefetchHeld(level)
			(&aggRow{raw: raw.raw}).PrefetchHeld(level)
		}, "level %d", level)
	}
	require.Equal(t, []byte{1, 2, 3}, []byte(raw.raw))
}

// CheckCBOR accepts exactly what UnmarshalCBOR accepts: over hand-picked
// encodings and random mutations of a real one.
func TestAccBoxCheckCBOR(t *testing.T) {
	row, err := cbor.Marshal([]any{int64(7), 2.5, "payload"})
	require.NoError(t, err)
	valid, err := (&accBox{raw: row, maxTime: 1700000000123}).MarshalCBOR()
	require.NoError(t, err)
	enc := func(v any) []byte {
		b, err := cbor.Marshal(v)
		require.NoError(t, err)
		return b
	}
	inputs := [][]byte{
		valid, {}, {0xf6}, {0xf7}, {0x80}, {0x81, 0x01}, {0x82, 0x01}, append(valid, 0x00),
		enc([]any{row, 1.5}), enc([]any{row, "x"}), enc([]any{nil, -3}), enc([]any{map[string]int{"a": 1}, 0}),
		enc([]any{row, uint64(math.MaxUint64)}), enc([]any{row, int64(math.MinInt64)}), enc([]any{1, 2, 3}),
		enc(map[string]any{"Row": row, "MaxTime": 1}), enc(cbor.Tag{Number: 55799, Content: []any{1, 2}}),
		enc([]any{cbor.Tag{Number: 1, Content: 5}, 9}), enc([]any{cbor.Tag{Number: 2, Content: []byte{1}}, 9}),
		{0x9f, 0x01, 0x02, 0xff}, {0x9f, 0x01, 0x02, 0x03, 0xff}, {0x82, 0x62, 0xff, 0xfe, 0x01}, // invalid UTF-8 row
	}
	for i := range valid {
		inputs = append(inputs, valid[:i]) // every truncation
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		m := slices.Clone(valid)
		for range 1 + rng.IntN(3) {
			m[rng.IntN(len(m))] = byte(rng.IntN(256))
		}
		inputs = append(inputs, m)
	}
	accepted, rejected := 0, 0
	for _, in := range inputs {
		uerr := new(accBox).UnmarshalCBOR(in)
		cerr := (*accBox)(nil).CheckCBOR(in)
		require.Equal(t, uerr == nil, cerr == nil, "input %x: UnmarshalCBOR %v, CheckCBOR %v", in, uerr, cerr)
		if uerr == nil {
			accepted++
		} else {
			rejected++
		}
	}
	require.Greater(t, accepted, 100)
	require.Greater(t, rejected, 100)
}

// TestWindowRestoresLargeAccumulators: a window accumulator that holds more
// values than the cbor package's default limits (131,072 array elements or
// map pairs, which the accumulator's decoding once used) restores into
// either backend (bbolt checks each accumulator with CheckCBOR, memory
// decodes it), and its window fires with every value: collect and
// count_distinct.
func TestWindowRestoresLargeAccumulators(t *testing.T) {
	step := stepYAML("key_by: id\n    window: {type: tumbling, size: 1h}\n    aggregate: {xs: collect(x), d: count_distinct(x)}")
	h := newKeyedHarness(t, step)
	const n = 140_000
	recs := make([]pipeline.Record, n)
	for i := range recs {
		recs[i] = h.rec(1000, fields{"id": "a", "x": i})
	}
	h.mustProcess(recs...)
	blobs := h.snapshot()
	for name, open := range map[string]func(statestore.Options) (statestore.Backend, error){
		"memory": func(o statestore.Options) (statestore.Backend, error) { return statestore.NewMemory(o) },
		"bbolt": func(o statestore.Options) (statestore.Backend, error) {
			return statestore.NewBolt(statestore.BoltOptions{Options: o, Dir: t.TempDir()})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newKeyedHarnessOn(t, step, open, blobs...)
			out := r.watermark(2 * 3_600_000)
			require.Len(t, out, 1)
			xs, ok := out[0].Fields["xs"].([]any)
			require.True(t, ok, "xs is %T", out[0].Fields["xs"])
			require.Len(t, xs, n)
			require.Equal(t, 0, xs[0])
			require.Equal(t, n-1, xs[n-1])
			require.Equal(t, int64(n), out[0].Fields["d"])
		})
	}
}
