// Package cputime reads the CPU time that benchmarks report per unit of
// work: of the process, and of the whole machine.
package cputime
