package statestore

import (
	"bytes"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// patchHead writes the shortest head over the reserved bytes, moving the
// content after them left or right, for every head length.
func TestPatchHead(t *testing.T) {
	for _, reserved := range []int{1, 3} {
		for _, n := range []uint64{0, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1} {
			content := []byte("content after the head")
			buf := append([]byte("before"), make([]byte, reserved)...)
			buf = append(buf, content...)
			got := patchHead(buf, len("before"), reserved, majorArray, n)
			want := append(AppendCBORHead([]byte("before"), majorArray, n), content...)
			require.Equal(t, want, got, "reserved %d, n %d", reserved, n)
		}
	}
}

type appenderBox struct{ n int64 }

func (b *appenderBox) MarshalCBOR() ([]byte, error) { return b.AppendCBOR(nil) }

func (b *appenderBox) AppendCBOR(dst []byte) ([]byte, error) {
	return AppendCBORInt(append(dst, 0x81), b.n), nil
}

type appenderStruct struct{ n int64 }

func (b *appenderStruct) MarshalCBOR() ([]byte, error) {
	return AppendCBORInt([]byte{0x81}, b.n), nil
}

func (b *appenderStruct) AppendCBOR(dst []byte) ([]byte, error) {
	return AppendCBORInt(append(dst, 0x81), b.n), nil
}

// checkAppender checks that valueAppender[S] appends what the cbor package
// encodes, after what dst holds.
func checkAppender[S any](t *testing.T, vs ...S) {
	t.Helper()
	app := valueAppender[S]()
	enc := &encoder{}
	for _, v := range vs {
		want, err := encMode.Marshal(&v)
		require.NoError(t, err)
		got, err := app([]byte("x"), &v, enc)
		require.NoError(t, err)
		require.Equal(t, append([]byte("x"), want...), got, "%T %#v", v, v)
	}
}

// The hand-written encodings of state values are the cbor package's bytes.
func TestValueAppender(t *testing.T) {
	checkAppender(t, 0, 1, -1, 23, 24, -24, -25, 255, 256, 65535, 65536, math.MaxInt, math.MinInt)
	checkAppender[int64](t, 0, 1, -1, 23, 24, -25, 1<<32, math.MaxInt64, math.MinInt64)
	checkAppender(t, "", "a", string(bytes.Repeat([]byte("é"), 200)), "\x00\xff")
	checkAppender(t, true, false)
	checkAppender(t, nil, []byte{}, []byte("raw"), bytes.Repeat([]byte{7}, 70000))
	checkAppender(t, (*appenderBox)(nil), &appenderBox{n: -300})
	checkAppender(t, appenderStruct{n: 5}, appenderStruct{n: 1 << 40})
	// The cbor package's own types and the rest go through it.
	checkAppender(t, 1.5, 0.1, math.Inf(-1))
	checkAppender(t, map[string]int64{"b": 1, "a": 2}, nil)
	checkAppender(t, []string{"x", "y"}, nil)
}

// AppendTo's buffer grows to what the key groups left are estimated to
// need, from the ones encoded so far, and is left alone while it has room.
func TestGrowBuffer(t *testing.T) {
	require.GreaterOrEqual(t, cap(growBuffer(nil, 0, 0, 128)), 64<<10)
	// 10 of 100 groups took 10 MiB: room for 90 MiB more, and an eighth.
	used := make([]byte, 10<<20, 10<<20+100)
	grown := growBuffer(used, len(used), 10, 100)
	require.GreaterOrEqual(t, cap(grown)-len(grown), 90<<20+(90<<20)/8)
	require.Equal(t, len(used), len(grown))
	roomy := make([]byte, 10<<20, 100<<20)
	require.Equal(t, cap(roomy), cap(growBuffer(roomy, len(roomy), 10, 100)))
}
