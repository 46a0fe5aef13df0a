package lowprio

import (
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// threadNice returns the nice value of the calling goroutine's thread
// (Go runs its low-priority goroutines on threads of their own, and
// nothing else on them).
func threadNice(t *testing.T) int {
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, syscall.Gettid())
	require.NoError(t, err)
	return 20 - p // the system call returns 20 - nice
}

// run starts n goroutines with Go(low, ...) that report their thread's nice
// value, waits until all have reported and (low) GOMAXPROCS was raised for
// all of them, reads GOMAXPROCS, then lets them end and waits until (low)
// GOMAXPROCS was set back.
func run(t *testing.T, low bool, n int) (nices []int, during int) {
	extras := make(chan int, 2*n)
	applied = func(extra int) { extras <- extra }
	defer func() { applied = nil }()
	waitFor := func(want int) {
		for low {
			if <-extras == want {
				return
			}
		}
	}
	release := make(chan struct{})
	got := make(chan int, n)
	for range n {
		Go(low, func() {
			got <- threadNice(t)
			<-release
		})
	}
	for range n {
		nices = append(nices, <-got)
	}
	waitFor(n)
	during = runtime.GOMAXPROCS(0)
	close(release)
	waitFor(0)
	return nices, during
}

// normalThreads reports the nice values of the threads of many goroutines
// started after the low-priority ones ended: none may run on one of their
// threads. Each holds its thread until all have reported, so that the
// runtime hands out every idle thread it has.
func normalThreads(t *testing.T) []int {
	const n = 64
	got := make(chan int, n)
	hold := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			got <- threadNice(t)
			<-hold
		}()
	}
	var out []int
	for range n {
		out = append(out, <-got)
	}
	close(hold)
	wg.Wait()
	return out
}

func TestGoLow(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	nices, during := run(t, true, 3)
	require.Equal(t, []int{Nice, Nice, Nice}, nices, "each on a thread of its own at nice %d", Nice)
	require.Equal(t, base+3, during, "a P more for each one running")
	require.Equal(t, base, runtime.GOMAXPROCS(0), "GOMAXPROCS back once none runs")
	for _, n := range normalThreads(t) {
		require.Zero(t, n, "a low-priority thread ran another goroutine after its own")
	}
}

func TestGoLowEnvGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "1") // only looked up: GOMAXPROCS is then set back, not to the default
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	runtime.GOMAXPROCS(base + 2)
	_, during := run(t, true, 1)
	require.Equal(t, base+3, during)
	require.Equal(t, base+2, runtime.GOMAXPROCS(0), "the value before, not the default")
}

func TestGoNormal(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	nices, during := run(t, false, 2)
	require.Equal(t, []int{0, 0}, nices)
	require.Equal(t, base, during)
}
