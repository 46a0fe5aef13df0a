//go:build !amd64

package prefetch

import "unsafe"

func rangeLines(p unsafe.Pointer, n uintptr) {}
