package prefetch

import "unsafe"

// Object asks for the memory of *p; p may be nil.
func Object[T any](p *T) {
	rangeLines(unsafe.Pointer(p), unsafe.Sizeof(*p))
}

// String asks for the bytes of s.
func String(s string) {
	rangeLines(unsafe.Pointer(unsafe.StringData(s)), uintptr(len(s)))
}
