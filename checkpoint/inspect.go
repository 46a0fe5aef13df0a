package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Read-only inspection of checkpoint stores, savepoints and snapshot blobs,
// for `eddy state inspect`: everything here decodes without the operators'
// Go types and changes nothing on disk. Unlike Open and
// OpenSavepoint, which refuse a checkpoint unless every part verifies,
// inspection reads each part on its own, so that one corrupt part is
// reported while the others are still shown.

// File is a checkpoint store (checkpoints.db) or a savepoint file
// opened read-only: no retention runs, incomplete checkpoints are not
// deleted, and nothing is verified until a part is read. Its methods are
// safe for concurrent use.
type File struct {
	db        *bolt.DB
	path      string
	savepoint bool
}

// OpenFile opens a checkpoint store or savepoint file read-only.
// A store that a running pipeline holds is locked (ErrStateDirLocked, after
// lockTimeout; 0 means DefaultLockTimeout); a file that is not an
// eddy checkpoint store or savepoint fails with ErrFormat. Called
// by `eddy state inspect` on the command's goroutine. Close the file when
// done.
func OpenFile(path string, lockTimeout time.Duration) (*File, error) {
	wrap := func(err error) error { return fmt.Errorf("open %s for inspection: %w", path, err) }
	st, err := os.Stat(path)
	if err != nil {
		return nil, wrap(err)
	}
	switch {
	case st.IsDir():
		return nil, wrap(fmt.Errorf("%w: a directory, not a checkpoint store or savepoint file", ErrFormat))
	case st.Size() == 0:
		// bbolt would try to initialise it, which read-only fails to do.
		return nil, wrap(fmt.Errorf("%w: an empty file", ErrFormat))
	}
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, wrap(fmt.Errorf("in use by another eddy (%s): %w", readOwner(path+".owner"), ErrStateDirLocked))
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, wrap(fmt.Errorf("%w: not a bbolt file (%v)", ErrFormat, err))
	case err != nil:
		return nil, wrap(err)
	}
	f := &File{db: db, path: path}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bktEddy)
		if b == nil || b.Get(keyFormat) == nil {
			return fmt.Errorf("%w: no %q record; not an eddy checkpoint store or savepoint", ErrFormat, keyFormat)
		}
		var wf wireFormat
		if err := decodeRecord(recFormat, b.Get(keyFormat), &wf); err != nil {
			return fmt.Errorf("format record: %w", err)
		}
		switch wf.Kind {
		case storeKind:
		case savepointKind:
			f.savepoint = true
		default:
			return fmt.Errorf("%w: an eddy %q file, not a checkpoint store or savepoint", ErrFormat, wf.Kind)
		}
		if tx.Bucket(bktCheckpoints) == nil {
			return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bktCheckpoints)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, wrap(err)
	}
	return f, nil
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

// Savepoint reports whether the file is a savepoint (ExportSavepoint wrote
// it) rather than a pipeline's checkpoint store.
func (f *File) Savepoint() bool { return f.savepoint }

// Close closes the file.
func (f *File) Close() error {
	if err := f.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.path, err)
	}
	return nil
}

// List returns the file's checkpoints, complete or not, newest first, as
// Store.List does; nothing is verified.
func (f *File) List() ([]Info, error) {
	var out []Info
	err := f.db.View(func(tx *bolt.Tx) error {
		out = listCheckpoints(tx)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", f.path, err)
	}
	return out, nil
}

// Checkpoint reads the metadata of completed checkpoint id (ErrNoCheckpoint
// when the file has no such completed checkpoint; ErrCorrupt when
// the metadata does not verify). Its parts are read, and each verified, by
// InspectedCheckpoint.Get.
func (f *File) Checkpoint(id int64) (*InspectedCheckpoint, error) {
	var rec *ckptRecord
	err := f.db.View(func(tx *bolt.Tx) error {
		var err error
		rec, err = readMeta(tx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d in %s: %w", id, f.path, err)
	}
	return &InspectedCheckpoint{rec: rec, f: f}, nil
}

// InspectedCheckpoint is a completed checkpoint of a File whose
// metadata verified; its parts have not been read yet. Valid until the file
// is closed; safe for concurrent use.
type InspectedCheckpoint struct {
	rec *ckptRecord
	f   *File
}

// ID returns the checkpoint's id.
func (c *InspectedCheckpoint) ID() int64 { return c.rec.id }

// Meta returns the checkpoint's metadata.
func (c *InspectedCheckpoint) Meta() Meta { return c.rec.meta }

// CompletedAt returns when the checkpoint was completed.
func (c *InspectedCheckpoint) CompletedAt() time.Time { return c.rec.completed }

// Parts lists the parts the metadata names, sorted by name, each as stored
// (a delta part with its Base, and the size of the delta).
func (c *InspectedCheckpoint) Parts() []PartInfo { return slices.Clone(c.rec.parts) }

// Get returns a copy of one part's blob after checking it against its
// checksum and the metadata (ErrCorrupt, which names the part),
// or ErrPartNotFound for a name the metadata does not list. A delta part
// is returned whole: every part of its chain is read from the checkpoints
// it names, checked so, and merged (ErrCorrupt when a base is
// missing, incomplete or corrupt).
func (c *InspectedCheckpoint) Get(part string) ([]byte, error) {
	wrap := func(err error) error { return fmt.Errorf("checkpoint %d: part %q: %w", c.rec.id, part, err) }
	pi, ok := c.rec.find(part)
	if !ok {
		return nil, wrap(ErrPartNotFound)
	}
	partsDir := "" // a savepoint inlines every part
	if !c.f.savepoint {
		partsDir = filepath.Join(filepath.Dir(c.f.path), PartsDir)
	}
	if pi.Base == 0 {
		blob, err := readPart(c.f.db.View, partsDir, c.rec.id, pi)
		if err != nil {
			return nil, wrap(err)
		}
		return blob, nil
	}
	var chain []partRef
	err := c.f.db.View(func(tx *bolt.Tx) error {
		var err error
		chain, err = newChainMetas(tx).partChain(c.rec.id, pi)
		return err
	})
	if err != nil {
		return nil, wrap(err)
	}
	blob, err := readChain(c.f.db.View, partsDir, chain)
	if err != nil {
		return nil, wrap(err)
	}
	return blob, nil
}
