//go:build !linux

package lowprio

import "errors"

// lower fails: elsewhere a nice value is the whole process's.
func lower() error { return errors.New("no per-thread priority on this system") }
