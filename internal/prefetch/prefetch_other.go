//go:build !amd64

package prefetch

import "unsafe"

func rangeLines(p unsafe.Pointer, n uintptr) {}

// Pointee asks for the first n bytes of what the pointer that v holds
// points to; nothing when v holds nil. v must hold a pointer: converting
// another type to an interface copies the value, usually to the heap.
func Pointee(v any, n uintptr) {}
