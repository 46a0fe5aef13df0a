package prefetch

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPrefetch: every length from 0 to a few lines, at every offset in a
// line, nil and empty memory, and pointers held in interfaces, prefetch
// without a fault and leave the memory as it was.
func TestPrefetch(t *testing.T) {
	buf := make([]byte, 4*64)
	for i := range buf {
		buf[i] = byte(i)
	}
	for off := range 64 {
		for n := range len(buf) - off + 1 {
			String(string(buf[off : off+n]))
			Pointee(&buf[off], uintptr(n))
		}
	}
	Object[[4]uint64](nil)
	Object(&buf)
	String("")
	Pointee(nil, 64)
	Pointee((*int)(nil), 64)
	Pointee(&buf, 0)
	for i := range buf {
		require.Equal(t, byte(i), buf[i])
	}
}

// TestPointeeAllocates nothing for a pointer.
func TestPointeeAllocatesNothing(t *testing.T) {
	v := &[8]uint64{}
	require.Zero(t, testing.AllocsPerRun(100, func() { Pointee(v, 64) }))
}
