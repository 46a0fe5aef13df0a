package lowprio

import "syscall"

// perThread: a thread can have a priority of its own.
const perThread = true

// lower gives the calling thread (locked to the goroutine) nice value Nice.
// On Linux, setpriority with a thread id sets that thread's alone.
func lower() error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), Nice)
}
