package statestore

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// forEachParallel calls fn(i) for every i in [0, n), on up to GOMAXPROCS
// goroutines, and returns the error of the smallest i that failed (after
// every call ended). A restore decodes its key groups with it: they are
// independent, and decoding is most of a restore's CPU.
func forEachParallel(n int, fn func(i int) error) error {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			if err := fn(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				errs[i] = fn(i)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
