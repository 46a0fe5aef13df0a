// Package cputime reads the CPU time that benchmarks report per unit of
// work: of the process, and of the whole machine.
package cputime

import "time"

// Usage is what a process has used so far.
type Usage struct {
	CPU    time.Duration // user and system
	System time.Duration // in the kernel: system calls, page faults
	// MinorFaults are page faults served without I/O, such as the first
	// touch of a page the heap got back from the kernel (zeroed by it).
	MinorFaults int64
}

// Sub returns the use between an earlier reading and u.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{CPU: u.CPU - earlier.CPU, System: u.System - earlier.System, MinorFaults: u.MinorFaults - earlier.MinorFaults}
}
