package statestore

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// patchHead writes the shortest head over the reserved bytes, moving the
// content after them left or right, for every head length, and the
// checksummed span over that content with it (a span before the head stays).
func TestPatchHead(t *testing.T) {
	for _, reserved := range []int{1, 3} {
		for _, n := range []uint64{0, 23, 24, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1} {
			content := []byte("content after the head")
			var sums blobSums
			sums.begin(0)
			buf := []byte("before")
			sums.end(buf)
			buf = append(buf, make([]byte, reserved)...)
			sums.begin(len(buf))
			buf = append(buf, content...)
			sums.end(buf)
			got := patchHead(buf, len("before"), reserved, majorArray, n, &sums)
			want := append(AppendCBORHead([]byte("before"), majorArray, n), content...)
			require.Equal(t, want, got, "reserved %d, n %d", reserved, n)
			require.Len(t, sums.spans, 2)
			for _, sp := range sums.spans {
				require.Equal(t, crc32.Checksum(got[sp.from:sp.to], crcTable), sp.crc, "reserved %d, n %d: span %d..%d", reserved, n, sp.from, sp.to)
			}
			require.Equal(t, string(content), string(got[sums.spans[1].from:sums.spans[1].to]))
			require.Equal(t, crc32.Checksum(got, crcTable), sums.sum(got, 0))
		}
	}
}

// blobSums.sum is the CRC-32C of the bytes from start, whatever spans it
// holds: none, adjacent ones, gaps before, between and after them, empty
// extends, and spans cut off by truncate.
func TestBlobSumsMatchChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var sums blobSums
		start := rng.IntN(64)
		buf := appendRandom(rng, nil, start) // before the blob
		for range rng.IntN(6) {
			buf = appendRandom(rng, buf, rng.IntN(40)) // a gap, or none
			sums.begin(len(buf))
			for range rng.IntN(4) {
				buf = appendRandom(rng, buf, rng.IntN(3000))
				sums.extend(buf)
			}
			buf = appendRandom(rng, buf, rng.IntN(100))
			sums.end(buf)
			if rng.IntN(5) == 0 {
				cut := len(buf) - rng.IntN(50)
				cut = max(cut, start)
				buf = buf[:cut]
				sums.truncate(cut)
			}
		}
		buf = appendRandom(rng, buf, rng.IntN(40))
		require.Equal(t, crc32.Checksum(buf[start:], crcTable), sums.sum(buf, start))
		require.Empty(t, sums.spans, "sum forgets the spans")
	}
}

func appendRandom(rng *rand.Rand, buf []byte, n int) []byte {
	for range n {
		buf = append(buf, byte(rng.Uint32()))
	}
	return buf
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

// A snapshot's blobs, checksummed from the spans the encoder summed while
// appending, verify and restore, through every way patchHead moves them: a
// key group with 70,000 entries in one state (its count outgrows the 3
// bytes reserved), with 30 states (the states' count outgrows its byte),
// with a state whose entries all expired (an empty span, the state cut
// off again), and a delta; with both backends (the bbolt backend sums
// every sumChunk bytes).
func TestSnapshotChecksumsFromSpans(t *testing.T) {
	for _, name := range []string{"memory", "bbolt"} {
		t.Run(name, func(t *testing.T) { testSnapshotChecksumsFromSpans(t, name) })
	}
}

func testSnapshotChecksumsFromSpans(t *testing.T, backend string) {
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

	// A delta: a tenth of the entries changed (more than sumChunk bytes).
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
