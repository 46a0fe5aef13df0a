// Package testkit holds what the tests of several packages share: waits
// that fail the test, saying what they waited for, instead of hanging it.
//
// It imports none of eddy's packages, so that any package's tests, internal
// ones included, can use it; production code never imports it.
package testkit

import (
	"testing"
	"time"
)

// HangAfter is how long a wait lasts before the test fails as hung. It is a
// guard against a wait that never ends, not a limit on how fast anything
// must be: nothing a test waits for should take more than a fraction of it.
const HangAfter = 2 * time.Minute

// deadlineMargin is how long before the test binary's -timeout a wait
// gives up, so that the test fails with a message rather than a panic.
const deadlineMargin = 10 * time.Second

// limit returns how long a wait of t may last: HangAfter, or less when
// the test binary's deadline comes sooner. Inside a testing/synctest
// bubble the clock is the bubble's, so the limit is HangAfter of fake
// time: a bubble whose goroutines are all blocked advances to it at once.
func limit(t testing.TB) time.Duration {
	d := HangAfter
	if dl, ok := deadline(t); ok {
		if left := time.Until(dl) - deadlineMargin; left < d {
			d = max(left, time.Second)
		}
	}
	return d
}

// deadline returns the test binary's deadline, if t has one. A *testing.T
// inside a synctest bubble has none: its Deadline panics there.
func deadline(t testing.TB) (dl time.Time, ok bool) {
	dt, is := t.(interface{ Deadline() (time.Time, bool) })
	if !is {
		return time.Time{}, false
	}
	defer func() {
		if recover() != nil {
			dl, ok = time.Time{}, false
		}
	}()
	return dt.Deadline()
}

// WaitFor receives from ch and returns what it received (the zero value
// when ch is closed). It fails t, naming what, when nothing arrives in
// time.
func WaitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	d := limit(t)
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case v := <-ch:
		return v
	case <-tm.C:
		t.Fatalf("waited %s for %s: it looks hung", d, what)
		panic("unreachable")
	}
}

// Wait calls wait (a WaitGroup's Wait, a Cmd's Wait, a read to EOF) on
// its own goroutine and returns when it returned. It fails t, naming what,
// when wait does not return in time; wait then goes on in the background.
func Wait(t testing.TB, what string, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	WaitFor(t, done, what)
}
