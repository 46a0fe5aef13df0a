package prefetch

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestIfaceDataWord: the second word of an interface holding a string
// points to the string's header, which Iface prefetches.
func TestIfaceDataWord(t *testing.T) {
	s := strings.Repeat("payload", 100)
	var v any = s
	header := (*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1]
	require.Equal(t, s, *(*string)(header))
	require.Same(t, unsafe.StringData(s), unsafe.StringData(*(*string)(header)))
}

// TestRange: every length from 0 to a few lines, at every offset in a line,
// and nil, empty and boxed values, prefetch without a fault and leave the
// memory as it was.
func TestRange(t *testing.T) {
	buf := make([]byte, 4*64)
	for i := range buf {
		buf[i] = byte(i)
	}
	for off := range 64 {
		for n := range len(buf) - off + 1 {
			Range(unsafe.Pointer(unsafe.SliceData(buf[off:])), uintptr(n))
		}
	}
	Range(nil, 100)
	String("")
	String("x")
	for _, v := range []any{nil, 1, "s", 2.5, []int{1}} {
		Iface(&v)
	}
	for i := range buf {
		require.Equal(t, byte(i), buf[i])
	}
}
