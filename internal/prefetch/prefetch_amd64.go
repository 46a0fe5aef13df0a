//go:build !noprefetch

package prefetch

import "unsafe"

// Enabled says whether the functions prefetch: true on amd64 unless built
// with the tag noprefetch.
const Enabled = true

// rangeLines asks for every cache line of the n bytes at p; nothing when p
// is nil or n is 0 (prefetch_amd64.s).
//
//go:noescape
func rangeLines(p unsafe.Pointer, n uintptr)

// Pointee asks for the first n bytes of what the pointer that v holds
// points to; nothing when v holds nil. v must hold a pointer: converting
// another type to an interface copies the value, usually to the heap.
//
//go:noescape
func Pointee(v any, n uintptr)
