package cmd

import (
	"os"
	"syscall"
)

// ReleaseMemoryLazily re-executes the process with madvdontneed=0 added to
// GODEBUG (see lazyReleaseEnv), keeping its arguments, environment, open
// files and process id. It returns only when it did not re-execute:
// GODEBUG sets madvdontneed already, or the exec failed (the process then
// goes on as it is; `eddy run` logs which way it releases memory).
// Benchmarks that run pipelines in-process call it first, as `eddy run`
// does.
func ReleaseMemoryLazily() {
	env, changed := lazyReleaseEnv(os.Environ())
	if !changed {
		return
	}
	// /proc/self/exe: the running binary, even if its file was replaced
	// since it started.
	_ = syscall.Exec("/proc/self/exe", os.Args, env)
}

// ReleaseAdvice names how this process returns freed memory to the kernel,
// by the GODEBUG it started with.
func ReleaseAdvice() string {
	if v, ok := godebugSetting(os.Getenv("GODEBUG"), godebugKey); ok && v == "0" {
		return "MADV_FREE"
	}
	return "MADV_DONTNEED"
}
