// Package memlimit sets the Go runtime's garbage collector for `eddy run`:
// its GC percent, and a soft memory limit below the container's and the
// machine's memory (runtime/debug). The environment's GOGC and GOMEMLIMIT,
// when set, win over both.
//
// Dependencies: the standard library only. cmd imports it, and the
// checkpoint benchmarks (operators) to run with the same settings.
package memlimit
