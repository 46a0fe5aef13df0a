package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/checkpoint/checkpointtest"
)

// fileParts are the parts writeFileCheckpoint streams with Create; the
// others of testParts it stores with Put.
var fileParts = map[string]bool{"op/agg/0": true, "op/agg/1": true, "op/agg/2": true}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writeFileCheckpoint writes checkpoint id as writeCheckpoint does
// (requireCheckpoint checks it), streaming the op/ parts to part files in
// pieces of 700 bytes.
func writeFileCheckpoint(t testing.TB, s *checkpoint.Store, id int64) {
	t.Helper()
	require.NoError(t, tryFileCheckpoint(s, id))
}

func tryFileCheckpoint(s *checkpoint.Store, id int64) error {
	p, err := s.Begin(id, checkpoint.Meta{
		Pipeline: "test",
		FileHash: "sha256:" + strconv.FormatInt(id, 16),
	})
	if err != nil {
		return err
	}
	for i, part := range testParts {
		blob := partBlob(id, part, partSize(i))
		if !fileParts[part] {
			if err := p.Put(part, blob); err != nil {
				return errors.Join(err, p.Abort())
			}
			continue
		}
		w, err := p.Create(part, 0)
		if err != nil {
			return errors.Join(err, p.Abort())
		}
		for off := 0; off < len(blob); off += 700 {
			if _, err := w.Write(blob[off:min(off+700, len(blob))]); err != nil {
				w.Abort()
				return errors.Join(err, p.Abort())
			}
		}
		if err := w.Close(); err != nil {
			return errors.Join(err, p.Abort())
		}
	}
	if err := p.Complete(context.Background()); err != nil {
		return errors.Join(err, p.Abort())
	}
	return nil
}

// completeAndRead completes p and reads its part back from s's latest
// checkpoint.
func completeAndRead(t *testing.T, s *checkpoint.Store, p checkpoint.Writer, part string) []byte {
	t.Helper()
	require.NoError(t, p.Complete(context.Background()))
	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	defer cp.Close()
	got, err := cp.Get(part)
	require.NoError(t, err)
	return got
}

// forEachIO runs fn with part files written with direct I/O (where the
// file system allows it) and without, as on a file system that refuses it.
func forEachIO(t *testing.T, fn func(t *testing.T)) {
	for _, direct := range []bool{true, false} {
		name := "buffered"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) {
			old := checkpoint.SetDirectIO(direct)
			defer checkpoint.SetDirectIO(old)
			fn(t)
		})
	}
}

// partDirs lists the checkpoint ids with a part-file directory.
func partDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, checkpoint.PartsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// Streamed parts read back as written, through Latest, List, a savepoint
// (which inlines them) and inspection; retention removes their files.
func TestCheckpointPartFiles(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, checkpoint.Options{Retain: 2})
		for id := int64(1); id <= 4; id++ {
			writeFileCheckpoint(t, s, id)
		}
		require.Equal(t, int64(4), latestID(t, s))
		checkpoint.SettleWriter(t, s)
		require.Equal(t, []string{"3", "4"}, partDirs(t, dir), "retention removes the files of deleted checkpoints")
		files, err := filepath.Glob(filepath.Join(dir, checkpoint.PartsDir, "4", "*"))
		require.NoError(t, err)
		require.Len(t, files, len(fileParts))

		infos, err := s.List()
		require.NoError(t, err)
		var size int64
		for i := range testParts {
			size += int64(partSize(i))
		}
		require.Equal(t, checkpoint.Info{ID: 4, Time: infos[0].Time, Pipeline: "test", Size: size, Parts: len(testParts), Complete: true}, infos[0])

		sp := filepath.Join(t.TempDir(), "sp")
		require.NoError(t, s.ExportSavepoint(4, sp))
		cp, err := checkpoint.OpenSavepoint(sp)
		require.NoError(t, err)
		requireCheckpoint(t, cp, 4)
		require.NoError(t, cp.Close())

		require.NoError(t, s.Close(context.Background()))
		// The metadata of a checkpoint with part files is a version-2 record:
		// a version-1 reader refuses it instead of taking the files for
		// missing parts. A checkpoint without them stays version 1.
		s = openStore(t, dir, checkpoint.Options{Retain: 2})
		writeCheckpoint(t, s, 5)
		require.NoError(t, s.Close(context.Background()))
		db, err := bolt.Open(filepath.Join(dir, checkpoint.FileName), 0o600, nil)
		require.NoError(t, err)
		require.NoError(t, db.View(func(tx *bolt.Tx) error {
			require.Equal(t, []byte("edcp\x02m"), ckptBucket(t, tx, 4).Get([]byte("meta"))[:6])
			require.Equal(t, []byte("edcp\x01m"), ckptBucket(t, tx, 5).Get([]byte("meta"))[:6])
			return nil
		}))
		require.NoError(t, db.Close())

		f, err := checkpoint.OpenFile(filepath.Join(dir, checkpoint.FileName), 0)
		require.NoError(t, err)
		defer f.Close()
		ic, err := f.Checkpoint(4)
		require.NoError(t, err)
		for i, part := range testParts {
			blob, err := ic.Get(part)
			require.NoError(t, err)
			require.Equal(t, partBlob(4, part, partSize(i)), blob, part)
		}
	})
}

// A part name is stored once, whether streamed or put.
func TestCheckpointPartFileDuplicate(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		s := openStore(t, t.TempDir(), checkpoint.Options{})
		p, err := s.Begin(1, checkpoint.Meta{Pipeline: "test"})
		require.NoError(t, err)
		w, err := p.Create("op/a/0", 0)
		require.NoError(t, err)
		_, err = p.Create("op/a/0", 0)
		require.ErrorIs(t, err, checkpoint.ErrDuplicatePart)
		require.ErrorIs(t, p.Put("op/a/0", []byte("x")), checkpoint.ErrDuplicatePart)
		require.NoError(t, p.Put("op/b/0", []byte("x")))
		_, err = p.Create("op/b/0", 0)
		require.ErrorIs(t, err, checkpoint.ErrDuplicatePart)
		_, err = w.Write([]byte("state"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.Equal(t, []byte("state"), completeAndRead(t, s, p, "op/a/0"))
	})
}

// Faults while a part is streamed fail its checkpoint, whose files are
// removed; the previous checkpoint stays the latest, and the id can be
// written again.
func TestCheckpointPartFileFaults(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			faults checkpoint.FaultFuncs
			errs   []error
		}{
			{
				name: "full disk on a write",
				faults: checkpoint.FaultFuncs{BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
					if id == 2 && part == "op/agg/1" {
						return nil, syscall.ENOSPC
					}
					return blob, nil
				}},
				errs: []error{syscall.ENOSPC},
			},
			{
				name: "torn write that loses bytes",
				faults: checkpoint.FaultFuncs{BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
					if id == 2 && part == "op/agg/1" {
						return blob[:len(blob)/2], nil
					}
					return blob, nil
				}},
				errs: []error{checkpoint.ErrCorrupt},
			},
			{
				// tryFileCheckpoint encodes every third piece into Room.
				name: "torn write of a blob in the writer's buffer",
				faults: checkpoint.FaultFuncs{BlobFunc: func() func(int64, string, []byte) ([]byte, error) {
					calls := 0
					return func(id int64, part string, blob []byte) ([]byte, error) {
						if id == 2 && part == "op/agg/1" {
							if calls++; calls == 3 {
								return blob[:len(blob)/2], nil
							}
						}
						return blob, nil
					}
				}()},
				errs: []error{checkpoint.ErrCorrupt},
			},
			{
				name: "failed create",
				faults: checkpoint.FaultFuncs{FileFunc: func(op checkpoint.Op, path string) error {
					if op == checkpoint.OpPartCreate && filepath.Base(filepath.Dir(path)) == "2" {
						return syscall.EACCES
					}
					return nil
				}},
				errs: []error{syscall.EACCES},
			},
			{
				name: "failed fsync of a part",
				faults: checkpoint.FaultFuncs{FileFunc: func(op checkpoint.Op, path string) error {
					if op == checkpoint.OpPartSync && filepath.Base(filepath.Dir(path)) == "2" {
						return errInjected
					}
					return nil
				}},
				errs: []error{errInjected},
			},
			{
				name: "failed fsync of the directory",
				faults: checkpoint.FaultFuncs{FileFunc: func(op checkpoint.Op, path string) error {
					if op == checkpoint.OpPartSyncDir && filepath.Base(path) == "2" {
						return errInjected
					}
					return nil
				}},
				errs: []error{errInjected},
			},
			{
				name: "failed fsync of the completion",
				faults: checkpoint.FaultFuncs{CommitFunc: func(op checkpoint.Op, id int64, _ string) error {
					if op == checkpoint.OpComplete && id == 2 {
						return errInjected
					}
					return nil
				}},
				errs: []error{errInjected},
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				s := openStore(t, dir, checkpoint.Options{Faults: tc.faults})
				writeFileCheckpoint(t, s, 1)
				err := tryFileCheckpoint(s, 2)
				for _, want := range tc.errs {
					require.ErrorIs(t, err, want)
				}
				complete, incomplete := listIDs(t, s)
				require.Equal(t, []int64{1}, complete)
				require.Empty(t, incomplete)
				require.Equal(t, []string{"1"}, partDirs(t, dir), "the failed checkpoint's files are removed")
				require.Equal(t, int64(1), latestID(t, s))

				require.NoError(t, s.Close(context.Background()))
				s = openStore(t, dir, checkpoint.Options{})
				writeFileCheckpoint(t, s, 2)
				require.Equal(t, int64(2), latestID(t, s))
			})
		}
	})
}

// A part file that is damaged, truncated or missing fails verification:
// Latest falls back to the previous checkpoint and says why.
func TestCheckpointPartFileCorruption(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			damage func(t *testing.T, dir, file string)
			reason string
		}{
			{"byte flip", func(t *testing.T, dir, _ string) {
				checkpointtest.CorruptPart(t, filepath.Join(dir, checkpoint.FileName), 2, "op/agg/1")
			}, `part \"op/agg/1\": checksum`},
			{"truncated", func(t *testing.T, _, file string) {
				require.NoError(t, os.Truncate(file, 10))
			}, `part \"op/agg/1\": file of 10 bytes`},
			{"missing", func(t *testing.T, _, file string) {
				require.NoError(t, os.Remove(file))
			}, `the file of part \"op/agg/1\" is missing`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				logs := &logBuffer{}
				s := openStore(t, dir, checkpoint.Options{Logger: logs.Logger()})
				writeFileCheckpoint(t, s, 1)
				writeFileCheckpoint(t, s, 2)
				require.NoError(t, s.Close(context.Background()))
				// op/agg/1 is the second file created.
				tc.damage(t, dir, filepath.Join(dir, checkpoint.PartsDir, "2", "2.part"))

				s = openStore(t, dir, checkpoint.Options{Logger: logs.Logger()})
				require.Equal(t, int64(1), latestID(t, s))
				require.Contains(t, logs.String(), "checkpoint=2")
				require.Contains(t, logs.String(), tc.reason)
			})
		}
	})
}

// The part files of a checkpoint a crash left incomplete (the store was
// closed before Complete, as a killed process leaves it) are removed when
// the store is opened again; other entries of the directory are left
// alone.
func TestCheckpointPartFileLeftovers(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, checkpoint.Options{})
		writeFileCheckpoint(t, s, 1)
		p, err := s.Begin(2, checkpoint.Meta{Pipeline: "test"})
		require.NoError(t, err)
		w, err := p.Create("op/agg/0", 0)
		require.NoError(t, err)
		_, err = w.Write([]byte("never completed"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		require.Equal(t, []string{"1", "2"}, partDirs(t, dir))
		require.NoError(t, s.Close(context.Background()))
		stray := filepath.Join(dir, checkpoint.PartsDir, "notes.txt")
		require.NoError(t, os.WriteFile(stray, []byte("mine"), 0o600))

		s = openStore(t, dir, checkpoint.Options{})
		require.Equal(t, []string{"1", "notes.txt"}, partDirs(t, dir))
		complete, incomplete := listIDs(t, s)
		require.Equal(t, []int64{1}, complete)
		require.Empty(t, incomplete)
		require.Equal(t, int64(1), latestID(t, s))
		writeFileCheckpoint(t, s, 2)
		require.Equal(t, int64(2), latestID(t, s))
	})
}

// beginPart opens a store in dir and begins checkpoint 1 with one streamed
// part.
func beginPart(t *testing.T, dir string) (*checkpoint.Store, checkpoint.Writer, checkpoint.PartWriter) {
	t.Helper()
	s := openStore(t, dir, checkpoint.Options{})
	p, err := s.Begin(1, checkpoint.Meta{Pipeline: "test"})
	require.NoError(t, err)
	w, err := p.Create("op/agg/0", 0)
	require.NoError(t, err)
	return s, p, w
}

// Abort of a checkpoint with streamed parts removes their files, and an
// aborted PartWriter fails its checkpoint.
func TestCheckpointPartFileAbort(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		dir := t.TempDir()
		s, p, w := beginPart(t, dir)
		_, err := w.Write([]byte("half"))
		require.NoError(t, err)
		w.Abort()
		require.ErrorIs(t, p.Complete(context.Background()), checkpoint.ErrFailed)
		require.NoError(t, p.Abort())
		require.Empty(t, partDirs(t, dir))
		_, err = s.Latest(context.Background())
		require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	})
}

// Abort does not wait for a streamed part to be written whole: once it
// started, the part's next write fails (and Close writes nothing), so an
// encoder stops at its next blob; Abort returns once the writer closed,
// and removes the part's file.
func TestCheckpointAbortStopsPartWriters(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		dir := t.TempDir()
		s, p, w := beginPart(t, dir)
		blob := bytes.Repeat([]byte("x"), 64)
		_, err := w.Write(blob)
		require.NoError(t, err)

		aborted := make(chan error, 1)
		go func() { aborted <- p.Abort() }()
		// Nothing signals that Abort started; it marks the checkpoint
		// before it waits, so write until a write fails. A million
		// writes (64 MiB) bound the loop should the writes never fail.
		for i := 0; err == nil; i++ {
			require.Less(t, i, 1<<20, "the part's writes go on after Abort started")
			select {
			case err := <-aborted:
				t.Fatalf("Abort returned (%v) while a part writer was open", err)
			default:
			}
			_, err = w.Write(blob)
			runtime.Gosched()
		}
		require.ErrorIs(t, err, checkpoint.ErrFinished)
		require.ErrorIs(t, w.Close(), checkpoint.ErrFinished)
		require.NoError(t, <-aborted)
		require.Empty(t, partDirs(t, dir))
		_, err = s.Latest(context.Background())
		require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	})
}

// A part larger than the writer's buffer, written in pieces of odd sizes,
// reads back byte for byte, and its file has exactly its size plus the
// checksum.
func TestCheckpointPartFileLarge(t *testing.T) {
	forEachIO(t, func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, dir, checkpoint.Options{})
		blob := partBlob(1, "op/big/0", 9<<20+123)
		p, err := s.Begin(1, checkpoint.Meta{Pipeline: "test"})
		require.NoError(t, err)
		w, err := p.Create("op/big/0", 0)
		require.NoError(t, err)
		for off, step := 0, 1; off < len(blob); off, step = off+step, step*3+1 {
			_, err := w.Write(blob[off:min(off+step, len(blob))])
			require.NoError(t, err)
		}
		require.NoError(t, w.Close())
		got := completeAndRead(t, s, p, "op/big/0")
		st, err := os.Stat(filepath.Join(dir, checkpoint.PartsDir, "1", "1.part"))
		require.NoError(t, err)
		require.Equal(t, int64(len(blob)+4), st.Size())
		require.True(t, bytes.Equal(blob, got), "the part reads back as written")
	})
}

// A file system that takes O_DIRECT at open but refuses direct writes
// (EINVAL) gets the part through ordinary writes, whole.
func TestCheckpointPartFileDirectRefused(t *testing.T) {
	old := checkpoint.SetDirectIO(true)
	defer checkpoint.SetDirectIO(old)
	if !old {
		t.Skip("no direct I/O on this system")
	}
	refused := 0
	defer checkpoint.RefuseDirectWrites(&refused)()
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	writeFileCheckpoint(t, s, 1)
	require.Equal(t, len(fileParts), refused, "one refused write per part, then ordinary ones")
	require.Equal(t, int64(1), latestID(t, s))
}
