//go:build !linux

package cmd

// ReleaseMemoryLazily does nothing here: the runtime returns memory with
// MADV_FREE by default on the BSDs and macOS, and has no such choice
// elsewhere.
func ReleaseMemoryLazily() {}

// ReleaseAdvice is empty here: there is no choice to report.
func ReleaseAdvice() string { return "" }
