package cputime

import (
	"runtime"
	"testing"
	"time"
)

// Busy work shows up in the process's CPU time, and on Linux in the
// machine's.
func TestCPUTimeGrows(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("not measured here")
	}
	p0, m0 := Process(), Machine()
	x := 0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
		x++
	}
	if x == 0 {
		t.Fatal("no work done")
	}
	if p := Process() - p0; p <= 0 {
		t.Errorf("process CPU grew by %v", p)
	}
	if runtime.GOOS == "linux" {
		if m := Machine() - m0; m <= 0 {
			t.Errorf("machine CPU grew by %v", m)
		}
	}
}
