//go:build !amd64 || noprefetch

package prefetch

import "unsafe"

// Enabled says whether the functions prefetch: false elsewhere than on
// amd64, and under the build tag noprefetch, where they do nothing and
// callers skip the work that only feeds them.
const Enabled = false

func rangeLines(p unsafe.Pointer, n uintptr) {}

// Pointee asks for the first n bytes of what the pointer that v holds
// points to; nothing when v holds nil. v must hold a pointer: converting
// another type to an interface copies the value, usually to the heap.
func Pointee(v any, n uintptr) {}
