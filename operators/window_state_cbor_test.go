package operators

import (
	"math"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/stretchr/testify/require"
)

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

// TestPrefetchNil: the snapshot encoder calls Prefetch on nil values too.
func TestPrefetchNil(t *testing.T) {
	require.Zero(t, (*accBox)(nil).Prefetch())
	require.Zero(t, (*aggRow)(nil).Prefetch())
	require.Equal(t, uint64(3), (&accBox{raw: []byte{1, 2, 3}}).Prefetch())
}
