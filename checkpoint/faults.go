package checkpoint

// Op names a write step of the checkpoint storage, as the fault
// hooks of Faults see it.
type Op string

// The write steps. The first five are bbolt transactions (Faults.
// Commit); the Part* ones are file-system steps of a part written with
// Writer.Create, and the Savepoint* ones those of ExportSavepoint
// (Faults.File).
const (
	OpPut      Op = "put"      // a transaction storing parts (Put)
	OpComplete Op = "complete" // the transaction writing the metadata (Complete)
	OpAbort    Op = "abort"    // a transaction deleting an incomplete checkpoint (Abort, Begin)
	OpRetain   Op = "retain"   // a transaction deleting checkpoints past retention, or leftovers
	OpExport   Op = "export"   // a transaction writing a savepoint file

	OpPartCreate  Op = "part-create"   // create a part's file (Create)
	OpPartSync    Op = "part-sync"     // fsync a part's file (PartWriter.Close)
	OpPartSyncDir Op = "part-sync-dir" // fsync the directory of a checkpoint's part files (Complete)

	OpSavepointCreate  Op = "savepoint-create"   // create PATH.tmp
	OpSavepointSync    Op = "savepoint-sync"     // fsync PATH.tmp once written
	OpSavepointRename  Op = "savepoint-rename"   // rename PATH.tmp to PATH
	OpSavepointSyncDir Op = "savepoint-sync-dir" // fsync PATH's directory
)

// Faults is the fault-injection seam of the checkpoint storage
// (like bbolt's failpoints): a test sets Options.Faults to
// make writes fail where a disk would, then checks that no failed checkpoint
// is ever observed complete and that the previous one stays readable.
// Production code leaves it nil. Methods are called from any goroutine,
// concurrently.
type Faults interface {
	// Blob is called by Writer.Put before the blob is written,
	// with the blob the caller gave, and by PartWriter.Write with each
	// piece of a streamed part. It returns the bytes to store instead:
	// a test returns a damaged copy to simulate a torn write (the stored
	// checksum is still that of the original, so reads detect it), or an
	// error (e.g. syscall.ENOSPC, a full disk) that fails the Put.
	Blob(id int64, part string, blob []byte) ([]byte, error)

	// Commit is called inside every write transaction, once per item it
	// writes (op, checkpoint id, and part for OpPut, else ""), after the
	// item's changes and before bbolt writes and fsyncs the transaction. An
	// error rolls the whole transaction back, as a failed write or fsync
	// would; every item of that transaction fails with it (several
	// concurrent Puts share one transaction).
	Commit(op Op, id int64, part string) error

	// File is called before each file-system step of a streamed part and
	// of ExportSavepoint; an error fails the step (and the checkpoint, or
	// the export, which removes PATH.tmp).
	File(op Op, path string) error
}

// FaultFuncs implements Faults with optional functions;
// a nil function injects nothing.
type FaultFuncs struct {
	BlobFunc   func(id int64, part string, blob []byte) ([]byte, error)
	CommitFunc func(op Op, id int64, part string) error
	FileFunc   func(op Op, path string) error
}

// Blob implements Faults.
func (f FaultFuncs) Blob(id int64, part string, blob []byte) ([]byte, error) {
	if f.BlobFunc == nil {
		return blob, nil
	}
	return f.BlobFunc(id, part, blob)
}

// Commit implements Faults.
func (f FaultFuncs) Commit(op Op, id int64, part string) error {
	if f.CommitFunc == nil {
		return nil
	}
	return f.CommitFunc(op, id, part)
}

// File implements Faults.
func (f FaultFuncs) File(op Op, path string) error {
	if f.FileFunc == nil {
		return nil
	}
	return f.FileFunc(op, path)
}

// noFaults is the Faults of production.
type noFaults struct{}

func (noFaults) Blob(_ int64, _ string, blob []byte) ([]byte, error) { return blob, nil }
func (noFaults) Commit(Op, int64, string) error                      { return nil }
func (noFaults) File(Op, string) error                               { return nil }
