package checkpoint_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/checkpoint"
)

// storeDigest is the sha256 of a file, to check that inspection changes
// nothing.
func storeDigest(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

func TestCheckpointFile(t *testing.T) {
	dir := t.TempDir()
	storePath := filepath.Join(dir, checkpoint.FileName)
	sp := filepath.Join(t.TempDir(), "sp.db")
	s, err := checkpoint.Open(dir, checkpoint.Options{Retain: 5})
	require.NoError(t, err)
	writeCheckpoint(t, s, 1)
	writeCheckpoint(t, s, 2)
	require.NoError(t, s.ExportSavepoint(1, sp))
	p, err := s.Begin(3, checkpoint.Meta{Pipeline: "test"})
	require.NoError(t, err)
	require.NoError(t, p.Put("op/agg/0", []byte("half")))

	// A running pipeline holds the store.
	_, err = checkpoint.OpenFile(storePath, 50*time.Millisecond)
	require.ErrorIs(t, err, checkpoint.ErrStateDirLocked)
	require.ErrorContains(t, err, "in use by another eddy (pid ")
	require.NoError(t, s.Close(context.Background()))

	before := storeDigest(t, storePath)
	f, err := checkpoint.OpenFile(storePath, 0)
	require.NoError(t, err)
	require.False(t, f.Savepoint())
	require.Equal(t, storePath, f.Path())
	list, err := f.List()
	require.NoError(t, err)
	require.Len(t, list, 3)
	for i, want := range []struct {
		id       int64
		complete bool
	}{{3, false}, {2, true}, {1, true}} {
		require.Equal(t, want.id, list[i].ID)
		require.Equal(t, want.complete, list[i].Complete)
		require.Equal(t, "test", list[i].Pipeline)
	}

	cp, err := f.Checkpoint(2)
	require.NoError(t, err)
	require.Equal(t, int64(2), cp.ID())
	require.Equal(t, "sha256:2", cp.Meta().FileHash)
	require.False(t, cp.CompletedAt().Before(cp.Meta().Time))
	var names []string
	for i, pi := range cp.Parts() {
		names = append(names, pi.Name)
		blob, err := cp.Get(pi.Name)
		require.NoError(t, err)
		require.Equal(t, partBlob(2, pi.Name, partSize(slices.Index(testParts, pi.Name))), blob, "part %d", i)
	}
	require.Equal(t, slices.Sorted(slices.Values(testParts)), names)
	_, err = cp.Get("op/nope/0")
	require.ErrorIs(t, err, checkpoint.ErrPartNotFound)

	_, err = f.Checkpoint(3)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	require.ErrorContains(t, err, "incomplete")
	_, err = f.Checkpoint(7)
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	require.NoError(t, f.Close())
	// Inspection deleted nothing (the store would delete the incomplete
	// checkpoint 3 on open) and wrote nothing.
	require.Equal(t, before, storeDigest(t, storePath))

	// One corrupt part: reading it fails, the others still read.
	db, err := bolt.Open(storePath, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		parts := tx.Bucket([]byte("checkpoints")).Bucket(binary.BigEndian.AppendUint64(nil, 2)).Bucket([]byte("parts"))
		v := slices.Clone(parts.Get([]byte("src/in/1")))
		v[3] ^= 0xff
		return parts.Put([]byte("src/in/1"), v)
	}))
	require.NoError(t, db.Close())
	f, err = checkpoint.OpenFile(storePath, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, f.Close()) }()
	cp, err = f.Checkpoint(2)
	require.NoError(t, err)
	_, err = cp.Get("src/in/1")
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.Regexp(t, `^checkpoint 2: part "src/in/1": corrupt checkpoint: part "src/in/1": checksum [0-9a-f]{8}, stored [0-9a-f]{8}$`, err.Error())
	blob, err := cp.Get("src/in/0")
	require.NoError(t, err)
	require.Equal(t, partBlob(2, "src/in/0", partSize(slices.Index(testParts, "src/in/0"))), blob)

	// The savepoint.
	spf, err := checkpoint.OpenFile(sp, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, spf.Close()) }()
	require.True(t, spf.Savepoint())
	list, err = spf.List()
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, int64(1), list[0].ID)
	cp, err = spf.Checkpoint(1)
	require.NoError(t, err)
	blob, err = cp.Get("op/agg/1")
	require.NoError(t, err)
	require.Equal(t, partBlob(1, "op/agg/1", partSize(slices.Index(testParts, "op/agg/1"))), blob)
}

func TestCheckpointFileNotACheckpointFile(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "pipeline.yaml")
	require.NoError(t, os.WriteFile(text, []byte(strings.Repeat("version: 1\n", 2000)), 0o644))
	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("x"))
		return err
	}))
	require.NoError(t, db.Close())

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	tiny := filepath.Join(dir, "tiny.db")
	require.NoError(t, os.WriteFile(tiny, []byte("x"), 0o644))

	for _, path := range []string{text, other, dir, empty, tiny} {
		_, err := checkpoint.OpenFile(path, 0)
		require.ErrorIs(t, err, checkpoint.ErrFormat, path)
		require.ErrorContains(t, err, "open "+path+" for inspection")
	}
	_, err = checkpoint.OpenFile(filepath.Join(dir, "missing.db"), 0)
	require.ErrorIs(t, err, os.ErrNotExist)
}
