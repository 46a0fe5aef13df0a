package hugeheap

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	enabledFile    = "/sys/kernel/mm/transparent_hugepage/enabled"
	pageSizeFile   = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"
	overcommitFile = "/proc/sys/vm/overcommit_memory"
	// defaultHugePage is the PMD size of x86-64 and of arm64 with 4 KiB
	// pages, where hpage_pmd_size cannot be read.
	defaultHugePage = 2 << 20
)

func mode() string {
	b, err := os.ReadFile(enabledFile)
	if err != nil {
		return ""
	}
	return selected(b)
}

// selected is the bracketed word of a sysfs choice: "always [madvise]
// never" -> "madvise".
func selected(b []byte) string {
	i := bytes.IndexByte(b, '[')
	if i < 0 {
		return ""
	}
	j := bytes.IndexByte(b[i:], ']')
	if j < 0 {
		return ""
	}
	return string(b[i+1 : i+j])
}

func hugePageSize() uintptr {
	b, err := os.ReadFile(pageSizeFile)
	if err != nil {
		return defaultHugePage
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n == 0 || n&(n-1) != 0 {
		return defaultHugePage
	}
	return uintptr(n)
}

func reserve(n int64) Result {
	r := Result{Mode: mode()}
	switch {
	case r.Mode != "madvise":
		r.Why = "THP mode is not madvise"
		return r
	case strictOvercommit():
		// The runtime maps the reserved range writable at once; under
		// strict accounting that would count n against the commit limit.
		r.Why = "strict overcommit (vm.overcommit_memory = 2)"
		return r
	case limitedAddressSpace():
		// A refused mapping is fatal to the runtime ("out of memory"), so
		// where mappings are limited, none is risked.
		r.Why = "address space or data size limited (ulimit -v or -d)"
		return r
	case raceEnabled:
		r.Why = "race detector (its shadow of the range would cost seconds)"
		return r
	}
	size := hugePageSize()
	if n < int64(2*size) {
		r.Why = "too small to hold a huge page"
		return r
	}
	b := make([]byte, n)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (start + size - 1) &^ (size - 1)
	hi := (start + uintptr(n)) &^ (size - 1)
	if err := unix.Madvise(b[lo-start:hi-start], unix.MADV_HUGEPAGE); err != nil {
		r.Why = "madvise: " + err.Error()
	} else {
		r.Advised = int64(hi - lo)
	}
	runtime.KeepAlive(b)
	debug.FreeOSMemory()
	return r
}

func strictOvercommit() bool {
	b, err := os.ReadFile(overcommitFile)
	return err == nil && string(bytes.TrimSpace(b)) == "2"
}

func limitedAddressSpace() bool {
	for _, res := range []int{unix.RLIMIT_AS, unix.RLIMIT_DATA} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err != nil || l.Cur != unix.RLIM_INFINITY {
			return true
		}
	}
	return false
}
