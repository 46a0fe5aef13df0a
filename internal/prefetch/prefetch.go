package prefetch

import "unsafe"

// Range asks for the n bytes at p, a prefetch per 64-byte cache line.
func Range(p unsafe.Pointer, n uintptr) {
	if p == nil || n == 0 {
		return
	}
	rangeLines(p, n)
}

// String asks for the bytes of s.
func String(s string) {
	Range(unsafe.Pointer(unsafe.StringData(s)), uintptr(len(s)))
}

// Iface asks for what the interface value v points to (for a string, the
// string's header), without loading it: an interface is two words, its
// type and its data, in every Go release so far (TestIfaceDataWord).
func Iface(v *any) {
	Range((*[2]unsafe.Pointer)(unsafe.Pointer(v))[1], 16)
}
