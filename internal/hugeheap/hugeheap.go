// Package hugeheap asks Linux to back the Go heap with transparent huge
// pages (2 MiB) where the system leaves that to each program.
//
// Keyed state in the memory backend is a few GiB of heap read in no
// particular order: each window box, row and payload a task or a snapshot
// touches is a translation-lookaside-buffer miss with 4 KiB pages, and on
// a virtual machine each miss walks two page tables. With 2 MiB pages the
// same heap needs 512 times fewer translations, and its first touch takes
// 512 times fewer page faults.
//
// Linux gives huge pages to every program when its THP mode is "always",
// and only to memory a program advises (madvise MADV_HUGEPAGE) when it is
// "madvise", the default of many distributions. The Go runtime does not
// advise its heap (it did for a while, go.dev/issue/64332), and it maps
// each new piece of heap just before it uses it, so nothing outside the
// runtime can advise it in time. Reserve works around that: it allocates
// one large object, which the runtime maps fresh and does not touch,
// advises its memory, and frees it. The runtime hands that address range
// out again for the objects that follow, and the kernel backs each 2 MiB
// of it with a huge page when it is first touched.
package hugeheap

import "sync"

// Mode is the system's THP mode: "always", "madvise" or "never" (the
// bracketed word of /sys/kernel/mm/transparent_hugepage/enabled), or ""
// where it cannot be read (other systems, kernels without THP).
func Mode() string { return mode() }

// Result says what Reserve did.
type Result struct {
	// Mode is the system's THP mode (see Mode).
	Mode string
	// Advised is how many bytes of heap address space were advised; 0
	// unless Mode is "madvise".
	Advised int64
	// Why says why nothing was advised, when Advised is 0.
	Why string
}

// Reserve grows the heap by about n bytes of address space, advises it for
// huge pages and frees it again, where the THP mode is "madvise"; it does
// nothing otherwise. Call it once, early, while the heap is small: memory
// the heap already holds is reused first, and its pages, touched already,
// stay small. Reserve returns the freed memory to the kernel
// (debug.FreeOSMemory), so it costs address space, not memory; n should be
// no more than the heap may grow to (the soft memory limit), as the kernel
// can later fill advised memory the runtime has released when it merges
// small pages into huge ones (khugepaged), and at most what the kernel
// maps at once (less than the machine's memory): the runtime cannot
// survive a refused mapping. Where mappings are limited (strict
// overcommit, ulimit -v or -d), and in race-enabled builds, Reserve does
// nothing.
//
// Only the first call of a process reserves; later ones return its
// result. The runtime clears memory it hands out again before reuse, so a
// second reservation would write to every page of the first one.
func Reserve(n int64) Result {
	once.Do(func() { first = reserve(n) })
	return first
}

var (
	once  sync.Once
	first Result
)
