package cputime

import (
	"syscall"
	"testing"
)

// Touching fresh anonymous memory faults its pages in: minor faults, and
// the time the kernel spends on them, counted in the process's usage.
func TestUsageCountsFaults(t *testing.T) {
	const size = 64 << 20
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(mem) }()
	u0 := ProcessUsage()
	for i := 0; i < size; i += 4096 {
		mem[i] = 1
	}
	d := ProcessUsage().Sub(u0)
	if d.MinorFaults <= 0 {
		t.Errorf("minor faults grew by %d touching %d fresh bytes", d.MinorFaults, size)
	}
	if d.CPU < d.System || d.System < 0 {
		t.Errorf("usage %+v: the system time is a part of the CPU time", d)
	}
}
