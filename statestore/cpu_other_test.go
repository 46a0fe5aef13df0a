//go:build !unix

package statestore_test

import "time"

// processCPU is not measured here: benchmarks then report 0 CPU.
func processCPU() time.Duration { return 0 }
