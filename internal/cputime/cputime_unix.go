//go:build unix

package cputime

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process returns the CPU time (user and system) the process has used,
// every goroutine and the garbage collector included.
func Process() time.Duration { return ProcessUsage().CPU }

// ProcessUsage returns the process's CPU time, its system part and its
// minor page faults so far.
func ProcessUsage() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}
	}
	return Usage{
		CPU:         time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		System:      time.Duration(ru.Stime.Nano()),
		MinorFaults: int64(ru.Minflt),
	}
}

// Machine returns the busy CPU time of the whole machine (every process
// and the kernel's threads, such as the page cache's write-back) from
// /proc/stat (Linux), or 0 where there is none.
func Machine() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, s := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(s, 10, 64)
		busy += n
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}
