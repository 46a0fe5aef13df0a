package prefetch

import "unsafe"

// rangeLines prefetches every cache line of the n > 0 bytes at p
// (prefetch_amd64.s).
//
//go:noescape
func rangeLines(p unsafe.Pointer, n uintptr)
