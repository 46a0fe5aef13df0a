package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/internal/fsutil"
)

// ExportSavepoint writes completed checkpoint id as a savepoint: one
// self-contained bbolt file at path holding the checkpoint's metadata and
// parts, in the store's layout (docs/checkpoints.md), that OpenSavepoint
// reads on any machine of the same byte order. Every part is verified as it
// is copied, so a corrupt checkpoint is not exported (ErrCorrupt).
// A savepoint is self-contained: a delta part is written merged with its
// chain, as a whole part (PartInfo.Base 0), and the metadata lists it so.
// The file is written to path.tmp, fsynced, renamed to path, and path's
// directory fsynced: path either does not exist or is complete. An existing
// path is not overwritten (fs.ErrExist). Safe to call while checkpoints are
// written; retention keeps checkpoint id until the export ends.
func (s *Store) ExportSavepoint(id int64, path string) (err error) {
	wrap := func(err error) error {
		return fmt.Errorf("export checkpoint %d of %s to savepoint %s: %w", id, s.path, path, err)
	}
	if err := s.pin(id); err != nil {
		return wrap(err)
	}
	defer s.unpin(id)
	var rec *ckptRecord
	var metaRec, infoRec []byte
	chains := map[string][]partRef{} // of the delta parts
	err = s.view(func(tx *bolt.Tx) error {
		var err error
		if rec, err = readMeta(tx, id); err != nil {
			return err
		}
		cb := tx.Bucket(bktCheckpoints).Bucket(ckptKey(id))
		metaRec = slices.Clone(cb.Get(keyMeta))
		infoRec = slices.Clone(cb.Get(keyInfo))
		metas := newChainMetas(tx)
		for _, pi := range rec.parts {
			if pi.Base != 0 {
				if chains[pi.Name], err = metas.partChain(id, pi); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return wrap(err)
	}
	if infoRec == nil {
		if infoRec, err = encodeRecord(recInfo, wireInfo{ID: id, Time: rec.meta.Time.UnixNano(), Pipeline: rec.meta.Pipeline, FileHash: rec.meta.FileHash}); err != nil {
			return wrap(err)
		}
	}
	if _, err := os.Lstat(path); err == nil {
		return wrap(fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return wrap(err)
	}

	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return wrap(err)
	}
	if err := s.faults.File(OpSavepointCreate, tmp); err != nil {
		return wrap(err)
	}
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: s.lockTimeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return wrap(err)
	}
	defer func() {
		if err != nil {
			_ = dst.Close()
			_ = os.Remove(tmp)
		}
	}()
	key := ckptKey(id)
	err = dst.Update(func(tx *bolt.Tx) error {
		if err := checkFormat(tx, savepointKind, true); err != nil {
			return err
		}
		cb, err := tx.Bucket(bktCheckpoints).CreateBucket(key)
		if err != nil {
			return err
		}
		if err := cb.Put(keyInfo, infoRec); err != nil {
			return err
		}
		if _, err := cb.CreateBucket(bktParts); err != nil {
			return err
		}
		return s.faults.Commit(OpExport, id, "")
	})
	if err != nil {
		return wrap(err)
	}
	// The parts, a transaction per maxBatchBytes, each read (and checked)
	// from the store on its own; a part the store keeps in a file is
	// inlined, so that the savepoint is one file, and a delta part is
	// merged with its chain, so that it needs no other checkpoint.
	// written lists the parts as the savepoint holds them.
	written := make([]wirePart, len(rec.parts))
	for i := 0; i < len(rec.parts); {
		err = dst.Update(func(tx *bolt.Tx) error {
			pb := tx.Bucket(bktCheckpoints).Bucket(key).Bucket(bktParts)
			size := 0
			for ; i < len(rec.parts) && size < maxBatchBytes; i++ {
				pi := rec.parts[i]
				tooLarge := func(size int64) error {
					return fmt.Errorf("%w: part %q of %d bytes is larger than a savepoint holds (%d)", ErrInvalidPart, pi.Name, size, bolt.MaxValueSize-partTrailer)
				}
				if pi.Size+partTrailer > bolt.MaxValueSize {
					return tooLarge(pi.Size)
				}
				var blob []byte
				var err error
				if chain := chains[pi.Name]; chain != nil {
					if blob, err = readChain(s.view, s.partsDir, chain); err != nil {
						return fmt.Errorf("part %q: %w", pi.Name, err)
					}
					if int64(len(blob))+partTrailer > bolt.MaxValueSize {
						return tooLarge(int64(len(blob)))
					}
					pi = PartInfo{Name: pi.Name, Size: int64(len(blob)), CRC32C: crc32.Checksum(blob, crcTable)}
				} else if blob, err = readPart(s.view, s.partsDir, id, pi); err != nil {
					return err
				}
				written[i] = wirePart{Name: pi.Name, Size: pi.Size, CRC: pi.CRC32C}
				v := binary.BigEndian.AppendUint32(blob, pi.CRC32C)
				if err := pb.Put([]byte(pi.Name), v); err != nil {
					return err
				}
				size += len(v)
			}
			return s.faults.Commit(OpExport, id, "")
		})
		if err != nil {
			return wrap(err)
		}
	}
	if len(chains) > 0 {
		// The metadata of a checkpoint with delta parts, rewritten to list
		// the merged parts, with neither bases nor part files.
		if metaRec, err = wholeMeta(metaRec, written); err != nil {
			return wrap(err)
		}
	}
	// The metadata last, as in the store: its presence marks completion.
	err = dst.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bktCheckpoints).Bucket(key).Put(keyMeta, metaRec); err != nil {
			return err
		}
		return s.faults.Commit(OpExport, id, "")
	})
	if err != nil {
		return wrap(err)
	}
	if err = dst.Close(); err != nil {
		return wrap(err)
	}
	if err = s.faults.File(OpSavepointSync, tmp); err != nil {
		return wrap(err)
	}
	if err = syncFile(tmp); err != nil {
		return wrap(err)
	}
	if err = s.faults.File(OpSavepointRename, path); err != nil {
		return wrap(err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return wrap(err)
	}
	if err = s.faults.File(OpSavepointSyncDir, filepath.Dir(path)); err != nil {
		return wrap(err)
	}
	if err = fsutil.SyncDir(filepath.Dir(path)); err != nil {
		return wrap(err)
	}
	return nil
}

// wholeMeta re-encodes metadata record rec with parts in place of its own
// and without bases: the metadata of a savepoint of a checkpoint whose
// delta parts were merged. It is written as version 1, as a savepoint has
// neither part files nor delta parts.
func wholeMeta(rec []byte, parts []wirePart) ([]byte, error) {
	var m wireMeta
	if err := decodeRecord(recMeta, rec, &m); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	m.Parts, m.Bases = parts, nil
	return encodeRecord(recMeta, m)
}

// OpenSavepoint opens the savepoint file at path read-only, checks that it
// holds exactly one completed checkpoint, and verifies it entirely, as
// Latest does (ErrCorrupt, ErrFormat). A savepoint
// holds no delta part (ExportSavepoint merges them): one that does is
// ErrCorrupt. The Checkpoint keeps the file open until Close.
func OpenSavepoint(path string) (*Checkpoint, error) {
	wrap := func(err error) error { return fmt.Errorf("open savepoint %s: %w", path, err) }
	if _, err := os.Stat(path); err != nil {
		return nil, wrap(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: DefaultLockTimeout})
	if err != nil {
		return nil, wrap(err)
	}
	var rec *ckptRecord
	err = db.View(func(tx *bolt.Tx) error {
		if err := checkFormat(tx, savepointKind, false); err != nil {
			return err
		}
		var ids []int64
		c := tx.Bucket(bktCheckpoints).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			id, ok := ckptID(k)
			if !ok || v != nil {
				return fmt.Errorf("%w: unexpected key %q in %q", ErrCorrupt, k, bktCheckpoints)
			}
			ids = append(ids, id)
		}
		if len(ids) != 1 {
			return fmt.Errorf("%w: %d checkpoints in a savepoint, expected 1", ErrCorrupt, len(ids))
		}
		var err error
		rec, err = verifyCheckpoint(context.Background(), tx, "", ids[0], nil)
		if errors.Is(err, ErrNoCheckpoint) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, wrap(err)
	}
	return &Checkpoint{rec: rec, db: db}, nil
}

// syncFile fsyncs a file that is closed already.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
