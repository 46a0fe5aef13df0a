// Package lowprio runs background work at a low CPU priority: it gets the
// processor time the rest of the process leaves idle, and little more.
// Checkpoints use it (checkpoint.priority: low) to encode and write keyed
// state without taking time from the tasks (docs/checkpoints.md).
//
// Go's scheduler has no priorities, so the work runs on an OS thread of its
// own at the kernel's lowest priority (nice 19), and GOMAXPROCS is one
// higher for each such goroutine while it runs: the thread then holds a P
// of its own, and the kernel, which preempts a nice 19 thread as soon as
// another wants its processor, decides who runs. Without the extra P, the
// low-priority goroutine would hold one of the tasks' Ps, and Go's
// scheduler would share it with them equally. Where threads cannot be given
// a priority of their own (other systems, or the call is refused), the work
// runs on an ordinary goroutine.
package lowprio

import (
	"os"
	"runtime"
	"sync"
)

// Nice is the nice value of a low-priority thread: the lowest priority.
// A nice 19 thread gets about 1.5% of a processor that a nice 0 thread
// keeps busy (the kernel's weights: 15 against 1024).
const Nice = 19

// Go runs fn on a new goroutine, at low priority when low is true.
func Go(low bool, fn func()) {
	if !low || !perThread {
		go fn()
		return
	}
	go func() {
		// Never unlocked: the thread, whose priority cannot be raised
		// again without privileges, exits with the goroutine instead of
		// running other goroutines.
		runtime.LockOSThread()
		if lower() != nil {
			fn()
			return
		}
		count(+1)
		defer count(-1)
		fn()
	}()
}

var (
	mu      sync.Mutex
	running int // low-priority goroutines running
	once    sync.Once
	kick    = make(chan struct{}, 1)
)

// count adds d to the low-priority goroutines running and has the updater
// set GOMAXPROCS to match. It does not wait for that: GOMAXPROCS stops the
// world, and waits for a garbage collection under way to end (seconds, with
// a large heap), which must not hold the work up.
func count(d int) {
	once.Do(func() { go update() })
	mu.Lock()
	running += d
	mu.Unlock()
	select {
	case kick <- struct{}{}:
	default: // a kick is pending: the updater reads running after it
	}
}

// applied is called by the updater after each change (tests).
var applied func(extra int)

// update is the goroutine that sets GOMAXPROCS: base (what it was when no
// low-priority goroutine ran) plus one per goroutine running.
func update() {
	var base, extra int
	var restore func()
	for range kick {
		mu.Lock()
		want := running
		mu.Unlock()
		if want == extra {
			continue
		}
		if extra == 0 {
			base = runtime.GOMAXPROCS(0)
			restore = func() { runtime.GOMAXPROCS(base) }
			if _, ok := os.LookupEnv("GOMAXPROCS"); !ok {
				// The runtime's default follows the CPU quota and
				// affinity; setting GOMAXPROCS stops that until this.
				restore = runtime.SetDefaultGOMAXPROCS
			}
		}
		if want == 0 {
			restore()
		} else {
			runtime.GOMAXPROCS(base + want)
		}
		extra = want
		if applied != nil {
			applied(extra)
		}
	}
}
