package nexmark

import "math"

// javaRandom is java.util.Random: a 48-bit linear congruential generator
// (Knuth, TAOCP 3.2.1), reproduced bit for bit so that the events are the
// Java generator's. Its whole state is one word: seeding it per event
// costs nothing.
type javaRandom struct{ seed uint64 }

const (
	lcgMultiplier = 0x5DEECE66D
	lcgAddend     = 0xB
	lcgMask       = 1<<48 - 1
)

// setSeed is new Random(seed): the seed scrambled with the multiplier.
func (r *javaRandom) setSeed(seed int64) {
	r.seed = (uint64(seed) ^ lcgMultiplier) & lcgMask
}

// next returns the next bits (1 to 32) high bits of the state, as Java's
// (int)(seed >>> (48 - bits)).
func (r *javaRandom) next(bits uint) int32 {
	r.seed = (r.seed*lcgMultiplier + lcgAddend) & lcgMask
	return int32(r.seed >> (48 - bits))
}

// nextInt32 is nextInt(): any int.
func (r *javaRandom) nextInt32() int32 { return r.next(32) }

// nextInt is nextInt(bound), bound > 0: uniform in [0, bound), with
// Java's shortcut for powers of two and its rejection of the values that
// would bias the remainder (the int overflow of u - r + m is the test).
func (r *javaRandom) nextInt(bound int32) int32 {
	v := r.next(31)
	m := bound - 1
	if bound&m == 0 {
		return int32((int64(bound) * int64(v)) >> 31)
	}
	for u := v; ; u = r.next(31) {
		v = u % bound
		if u-v+m >= 0 {
			return v
		}
	}
}

// nextLong is nextLong(): two ints, the first shifted up.
func (r *javaRandom) nextLong() int64 {
	hi := int64(r.next(32))
	return hi<<32 + int64(r.next(32))
}

// nextDouble is nextDouble(): 53 random bits scaled to [0, 1).
func (r *javaRandom) nextDouble() float64 {
	hi := int64(r.next(26))
	return float64(hi<<27+int64(r.next(27))) * (1.0 / (1 << 53))
}

// nextLongN is the reference's LongGenerator.nextLong(random, n): nextInt
// below Integer.MAX_VALUE, else |nextLong() % n| (skewed, as there; Java's
// Math.abs leaves the smallest long negative, so does this).
func (r *javaRandom) nextLongN(n int64) int64 {
	if n < math.MaxInt32 {
		return int64(r.nextInt(int32(n)))
	}
	v := r.nextLong() % n
	if v < 0 {
		v = -v
	}
	return v
}
