package statestore

// CRC-32C of a concatenation from the CRCs of its pieces (zlib's
// crc32_combine), so that a part file's checksum follows from its blobs'
// without reading their bytes a second time.

// castagnoliReversed is the Castagnoli polynomial, bit-reversed as
// hash/crc32 uses it.
const castagnoliReversed = 0x82f63b78

// multModP returns a*b modulo the polynomial, both reflected (bit 31 is x^0).
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nModP[k] is x^(2^k) modulo the polynomial, for every k a length in
// bits can need. (zlib keeps 32 and wraps k around, as x^(2^32) is x for
// its polynomial; for Castagnoli's it is not, and a piece of 512 MiB or
// more combined wrongly that way.)
var x2nModP = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// crcCombine returns the CRC-32C of a‖b from crcA (of a), crcB (of b) and
// b's length: crcA shifted over lenB zero bytes, plus crcB. It costs
// O(log lenB), whatever the bytes.
func crcCombine(crcA, crcB uint32, lenB int) uint32 {
	p := uint32(1) << 31 // x^0
	k := 3               // lenB bytes are 8*lenB bits: x^(2^3) per byte
	for n := uint64(lenB); n != 0; n >>= 1 {
		if n&1 != 0 {
			p = multModP(x2nModP[k], p)
		}
		k++
	}
	return multModP(p, crcA) ^ crcB
}
