package statestore

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRCCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	lengths := []int{0, 1, 3, 4, 7, 8, 63, 64, 1000, 4096, 65537, 1 << 20}
	for range 200 {
		lengths = append(lengths, r.IntN(len(buf)+1))
	}
	for _, n := range lengths {
		cut := r.IntN(n + 1)
		a, b := buf[:cut], buf[cut:n]
		got := crcCombine(crc32.Checksum(a, crcTable), crc32.Checksum(b, crcTable), len(b))
		if want := crc32.Checksum(buf[:n], crcTable); got != want {
			t.Fatalf("combine of %d + %d bytes: %08x, want %08x", len(a), len(b), got, want)
		}
	}
	// Many pieces, as a part file's blobs are.
	var crc uint32
	for off := 0; off < len(buf); {
		n := min(len(buf)-off, 1+r.IntN(50000))
		crc = crcCombine(crc, crc32.Checksum(buf[off:off+n], crcTable), n)
		off += n
	}
	if want := crc32.Checksum(buf, crcTable); crc != want {
		t.Fatalf("combine of pieces: %08x, want %08x", crc, want)
	}
}

// TestCRCCombineLongPieces: pieces of 512 MiB and more (a key group's
// blob can be that large) combine consistently. Shifting a CRC over n
// zero bytes at once equals shifting it over n1 and then n-n1 bytes, for
// lengths up to 2^40 bytes; computing their CRCs directly would take too
// long for a test.
func TestCRCCombineLongPieces(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		crc := r.Uint32()
		n := r.IntN(1 << 40)
		n1 := r.IntN(n + 1)
		whole := crcCombine(crc, 0, n)
		if parts := crcCombine(crcCombine(crc, 0, n1), 0, n-n1); parts != whole {
			t.Fatalf("shift over %d bytes: %08x at once, %08x over %d and %d", n, whole, parts, n1, n-n1)
		}
	}
}

func BenchmarkCRCCombine(b *testing.B) {
	for i := range b.N {
		crcCombine(uint32(i), 0x12345678, 1<<20+i)
	}
}
