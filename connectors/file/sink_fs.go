package file

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/eddy-stream/eddy/internal/fsutil"
)

// fileSystem is the seam between the transactional file sink and the
// operating system: every create, write, fsync, rename and delete of part
// files goes through it, so that tests can inject faults (a failing fsync,
// a torn write, a failing rename) exactly where a real disk would fail.
type fileSystem interface {
	// MkdirAll creates dir and its parents.
	MkdirAll(dir string) error
	// Create creates name for writing; it fails if name exists.
	Create(name string) (fsFile, error)
	// Rename renames from to to, atomically (replacing to).
	Rename(from, to string) error
	// Remove deletes name.
	Remove(name string) error
	// Lstat describes name without following a symlink.
	Lstat(name string) (fs.FileInfo, error)
	// ReadDir lists dir.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// SyncDir fsyncs dir, making the renames and deletes in it durable.
	SyncDir(dir string) error
}

// fsFile is a part file open for writing.
type fsFile interface {
	io.Writer
	Sync() error
	Close() error
}

// osFS is the fileSystem of the operating system.
type osFS struct{}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func (osFS) Create(name string) (fsFile, error) {
	return os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
}

func (osFS) Rename(from, to string) error              { return os.Rename(from, to) }
func (osFS) Remove(name string) error                  { return os.Remove(name) }
func (osFS) Lstat(name string) (fs.FileInfo, error)    { return os.Lstat(name) }
func (osFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }
func (osFS) SyncDir(dir string) error                  { return fsutil.SyncDir(dir) }

// pathErr wraps err of op on path so that the message names the path once:
// the errors of package os name it already ("write PATH: no space left on
// device"), and get only op, unless it is theirs too.
func pathErr(op, path string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe) && pe.Path == path:
		if pe.Op == op {
			return err
		}
		return fmt.Errorf("%s: %w", op, err)
	case errors.As(err, &le) && (le.Old == path || le.New == path):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}
