package operators

import (
	"os"
	"runtime/debug"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// TestPrefetchLevelZeroReadsNothing: at level 0 a state value only asks for
// its own memory and reads none of it (statestore.Prefetcher: a level reads
// only what the levels before asked for, a batch of entries earlier; a load
// of a value not yet in the cache would stall the encoder). A value on a
// page that cannot be read shows it: a load there faults, a prefetch does
// not.
func TestPrefetchLevelZeroReadsNothing(t *testing.T) {
	page, err := syscall.Mmap(-1, 0, os.Getpagesize(), syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	require.NoError(t, err)
	defer func() { require.NoError(t, syscall.Munmap(page)) }()
	p := unsafe.Pointer(unsafe.SliceData(page))
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for name, v := range map[string]statestore.Prefetcher{
		"window box":               (*accBox)(p),
		"continuous aggregate row": (*aggRow)(p),
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: Prefetch(0) read the value: %v", name, r)
				}
			}()
			v.Prefetch(0)
		}()
	}
}
