package checkpoint

import (
	"os"
	"syscall"
)

// directIOFlag opens a part file for direct I/O.
const directIOFlag = syscall.O_DIRECT

// errInvalid is what a file system that cannot do direct I/O returns for a
// write.
var errInvalid error = syscall.EINVAL

// clearDirectIO turns direct I/O off for f (Linux allows it with
// F_SETFL).
func clearDirectIO(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if e != 0 {
			serr = e
			return
		}
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, flags&^syscall.O_DIRECT); e != 0 {
			serr = e
		}
	})
	if err != nil {
		return err
	}
	return serr
}
