//go:build !linux

package lowprio

import "errors"

// perThread: elsewhere a nice value is the whole process's.
const perThread = false

func lower() error { return errors.New("no per-thread priority on this system") }
