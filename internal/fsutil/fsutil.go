package fsutil

import (
	"os"
	"runtime"
)

// SyncDir fsyncs directory dir, making the files created, renamed or
// removed in it durable: a rename is only as durable as its directory.
// On Windows, where a directory cannot be fsynced, it does nothing.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
