//go:build !unix

package cputime

import "time"

// Process is not measured here: it returns 0.
func Process() time.Duration { return 0 }

// ProcessUsage is not measured here: it returns zeros.
func ProcessUsage() Usage { return Usage{} }

// Machine is not measured here: it returns 0.
func Machine() time.Duration { return 0 }
