package statestore

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

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

// A snapshot's blobs verify and restore through every way patchHead moves
// them: a key group with 70,000 entries in one state (its count outgrows
// the 3 bytes reserved), with 30 states (the states' count outgrows its
// byte), with a state whose entries all expired (the state cut off again),
// and a delta; with both backends.
func TestSnapshotPatchedHeads(t *testing.T) {
	for _, name := range []string{"memory", "bbolt"} {
		t.Run(name, func(t *testing.T) { testSnapshotPatchedHeads(t, name) })
	}
}

func testSnapshotPatchedHeads(t *testing.T, backend string) {
	now := int64(1_000_000)
	opts := Options{KeyGroup: func(k string) int { return int(k[0]) % 2 }, KeyGroups: [2]int{0, 2},
		Clock: func() int64 { return now }, Incremental: true}
	open := func() IncrementalBackend {
		t.Helper()
		var b IncrementalBackend
		var err error
		if backend == "memory" {
			b, err = NewMemory(opts)
		} else {
			b, err = NewBolt(BoltOptions{Options: opts, Dir: t.TempDir()})
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b := open()
	big, err := RegisterValue(b, ValueDescriptor[int64]{Name: "big"})
	require.NoError(t, err)
	for i := range 70_000 {
		big.Put(fmt.Sprintf("a%06d", i), "", int64(i)) // 'a' is odd: key group 1
	}
	want := map[string]int64{}
	var small []ValueState[int64]
	for s := range 30 {
		v, err := RegisterValue(b, ValueDescriptor[int64]{Name: fmt.Sprintf("s%02d", s)})
		require.NoError(t, err)
		v.Put("b", "", int64(s)) // key group 0
		want[fmt.Sprintf("s%02d", s)] = int64(s)
		small = append(small, v)
	}
	expiring, err := RegisterValue(b, ValueDescriptor[int64]{Name: "expiring", TTL: time.Second})
	require.NoError(t, err)
	expiring.Put("b", "", 1)
	expiring.Put("a", "", 1)
	now += 2000 // expired: both groups skip the state's entries and cut it off again
	check := func(s Snapshot) [][]byte {
		t.Helper()
		var out bytes.Buffer
		_, err := s.WriteTo(&out)
		require.NoError(t, err)
		var blobs [][]byte
		require.NoError(t, SplitBlobs(out.Bytes(), func(_ int, blob []byte) error {
			_, _, _, err := parseBlobFrame(blob) // the checksum
			blobs = append(blobs, blob)
			return err
		}))
		require.Len(t, blobs, 2)
		return blobs
	}
	s, err := b.SnapshotCheckpoint(1)
	require.NoError(t, err)
	blobs := check(s)
	s.Release()
	b.CheckpointCompleted(1)

	r := open()
	require.NoError(t, r.Restore(blobs...))
	rbig, err := RegisterValue(r, ValueDescriptor[int64]{Name: "big"})
	require.NoError(t, err)
	for _, i := range []int{0, 65_535, 65_536, 69_999} {
		got, ok := rbig.Get(fmt.Sprintf("a%06d", i), "")
		require.True(t, ok)
		require.Equal(t, int64(i), got)
	}
	for name, v := range want {
		st, err := RegisterValue(r, ValueDescriptor[int64]{Name: name})
		require.NoError(t, err)
		got, ok := st.Get("b", "")
		require.True(t, ok, name)
		require.Equal(t, v, got, name)
	}

	// A delta: a tenth of the entries changed.
	for i := 7; i < 70_000; i += 10 {
		big.Put(fmt.Sprintf("a%06d", i), "", int64(-i))
	}
	small[3].Put("b", "", -3)
	s, err = b.SnapshotCheckpoint(2)
	require.NoError(t, err)
	require.NotZero(t, s.(DeltaSnapshot).Base())
	check(s)
	s.Release()
}
