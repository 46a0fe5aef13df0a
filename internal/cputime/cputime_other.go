//go:build !unix

package cputime

import "time"

// Process is not measured here: it returns 0.
func Process() time.Duration { return 0 }

// Machine is not measured here: it returns 0.
func Machine() time.Duration { return 0 }
