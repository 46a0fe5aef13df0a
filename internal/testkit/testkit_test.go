package testkit_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
)

// recorder is a testing.TB that records a Fatalf instead of ending the
// test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	// Fatalf must not return: end the goroutine as testing does.
	runtime.Goexit()
}

func TestWaitForReturnsWhatArrives(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	require.Equal(t, 7, testkit.WaitFor(t, ch, "a number"))
	close(ch)
	require.Zero(t, testkit.WaitFor(t, ch, "the close"))
	var wg sync.WaitGroup
	wg.Go(func() {})
	testkit.Wait(t, "the group", wg.Wait)
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int, 1)
		ch <- 8
		require.Equal(t, 8, testkit.WaitFor(t, ch, "a number in a bubble"))
	})
}

// A wait that never ends fails after HangAfter, naming what it waited for
// (in a bubble, so the test takes no time).
func TestWaitForFailsWhenHung(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		start := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			testkit.WaitFor(r, make(chan int), "a number that never comes")
		}()
		<-done
		require.Equal(t, "waited 2m0s for a number that never comes: it looks hung", r.failed)
		require.Equal(t, testkit.HangAfter, time.Since(start))
	})
}
