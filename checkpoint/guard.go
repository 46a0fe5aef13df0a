package checkpoint

import (
	"fmt"
	"path/filepath"
	"runtime/debug"
)

// Guard runs fn, which reads the checkpoint store of dir, turning a panic
// or memory fault of bbolt on a file damaged beyond its checksums into an
// error wrapping ErrCorrupt: a damaged store is a failure to
// report, not a crash. Called by whoever opens or reads a store (a run
// choosing its restore point, the commands that inspect a store), on the
// goroutine that does the reading.
func Guard(dir string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s is damaged beyond its checksums (bbolt: %v); restore from a savepoint, or move the state dir away and start with eddy run --fresh",
				ErrCorrupt, filepath.Join(dir, FileName), r)
		}
	}()
	return fn()
}
