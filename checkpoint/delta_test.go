package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// Incremental checkpoints in the checkpoint store: delta parts
// (Create with a base), their bases in the metadata, retention of chains, reads
// that merge, verification and savepoints.

// openDeltaStore opens the store in dir, closed when the test ends.
func openDeltaStore(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// deltaPart is a part a test checkpoint streams: whole with base 0, else
// a delta on checkpoint base.
type deltaPart struct {
	name string
	base int64
	blob []byte
}

// opaque is a part's content where the store need not merge it.
func opaque(id int64, name string) []byte {
	return fmt.Appendf(nil, "<checkpoint %d part %s>%s", id, name, bytes.Repeat([]byte{byte('a' + id%26)}, 300))
}

// beginDelta begins checkpoint id with parts streamed (in two pieces) and
// the part "src/in/0" put, and returns it pending.
func beginDelta(t *testing.T, s *Store, id int64, parts ...deltaPart) Writer {
	t.Helper()
	p, err := s.Begin(id, Meta{Pipeline: "test"})
	require.NoError(t, err)
	require.NoError(t, p.Put("src/in/0", opaque(id, "src/in/0")))
	for _, dp := range parts {
		var w PartWriter
		if dp.base == 0 {
			w, err = p.Create(dp.name, 0)
		} else {
			w, err = p.Create(dp.name, dp.base)
		}
		require.NoError(t, err, "part %q of checkpoint %d", dp.name, id)
		half := len(dp.blob) / 2
		_, err = w.Write(dp.blob[:half])
		require.NoError(t, err)
		_, err = w.Write(dp.blob[half:])
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	return p
}

// writeDelta writes checkpoint id as beginDelta does and completes it.
func writeDelta(t *testing.T, s *Store, id int64, parts ...deltaPart) {
	t.Helper()
	require.NoError(t, beginDelta(t, s, id, parts...).Complete(context.Background()))
}

// completeIDs lists the store's completed checkpoints, newest first, and
// requires that it holds no incomplete one.
func completeIDs(t *testing.T, s *Store) []int64 {
	t.Helper()
	complete, incomplete := ListIDs(t, s)
	require.Empty(t, incomplete)
	return complete
}

// fileDirIDs lists, newest first, the checkpoints with a part-file
// directory, once the writer has removed what it had to.
func fileDirIDs(t *testing.T, s *Store) []int64 {
	t.Helper()
	SettleWriter(t, s)
	ids, err := s.partFileDirs()
	require.NoError(t, err)
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

// pinCount is the number of pins the store holds.
func pinCount(s *Store) int {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	n := 0
	for _, c := range s.pins {
		n += c
	}
	return n
}

// rawMeta returns checkpoint id's metadata record as stored.
func rawMeta(t *testing.T, s *Store, id int64) []byte {
	t.Helper()
	var rec []byte
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		cb := tx.Bucket(bktCheckpoints).Bucket(ckptKey(id))
		require.NotNil(t, cb, "checkpoint %d", id)
		rec = slices.Clone(cb.Get(keyMeta))
		return nil
	}))
	require.NotNil(t, rec, "checkpoint %d has no metadata", id)
	return rec
}

// metaKeys returns the keys of a metadata record's CBOR map.
func metaKeys(t *testing.T, rec []byte) []int {
	t.Helper()
	var m map[int]any
	require.NoError(t, decMode.Unmarshal(rec[recHeaderSize:len(rec)-recTrailer], &m))
	return slices.Sorted(func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

// A delta part's base is recorded in the metadata (key 8, in a version-3
// record), comes back in PartInfo.Base (also after reopening), and marks
// the checkpoint incremental in List; a checkpoint without delta parts is
// written as before, without key 8.
func TestCheckpointDeltaMetadata(t *testing.T) {
	dir := t.TempDir()
	s := openDeltaStore(t, dir, Options{})
	writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")}, deltaPart{name: "op/a/1", blob: opaque(1, "op/a/1")})
	d0, d1 := []byte("a delta of op/a/0"), opaque(2, "op/a/1")
	writeDelta(t, s, 2, deltaPart{name: "op/a/0", base: 1, blob: d0}, deltaPart{name: "op/a/1", blob: d1})

	rec1, rec2 := rawMeta(t, s, 1), rawMeta(t, s, 2)
	require.Equal(t, byte(filesFormatVersion), rec1[4], "a checkpoint without delta parts keeps its version")
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, metaKeys(t, rec1))
	require.Equal(t, byte(deltaFormatVersion), rec2[4])
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8}, metaKeys(t, rec2))
	var m wireMeta
	require.NoError(t, decodeRecord(recMeta, rec2, &m))
	require.Equal(t, map[string]int64{"op/a/0": 1}, m.Bases)

	src := int64(len(opaque(2, "src/in/0")))
	want := []PartInfo{
		{Name: "op/a/0", Size: int64(len(d0)), CRC32C: crc32.Checksum(d0, crcTable), Base: 1},
		{Name: "op/a/1", Size: int64(len(d1)), CRC32C: crc32.Checksum(d1, crcTable)},
		{Name: "src/in/0", Size: src, CRC32C: crc32.Checksum(opaque(2, "src/in/0"), crcTable)},
	}
	check := func(s *Store) {
		t.Helper()
		cp, err := s.Checkpoint(context.Background(), 2)
		require.NoError(t, err)
		defer cp.Close()
		require.Equal(t, want, cp.Parts())
		require.Equal(t, int64(len(d0)+len(d1))+src, cp.Size(), "the checkpoint's own parts, not its bases'")

		list, err := s.List()
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, int64(2), list[0].ID)
		require.True(t, list[0].Incremental)
		require.Equal(t, cp.Size(), list[0].Size)
		require.False(t, list[1].Incremental)
	}
	check(s)
	require.NoError(t, s.Close(context.Background()))
	check(openDeltaStore(t, dir, Options{}))
}

// oldWireMeta is the metadata as builds before delta parts wrote it:
// keys 1 to 7.
type oldWireMeta struct {
	ID           int64             `cbor:"1,keyasint"`
	Time         int64             `cbor:"2,keyasint"`
	Completed    int64             `cbor:"3,keyasint"`
	Pipeline     string            `cbor:"4,keyasint"`
	FileHash     string            `cbor:"5,keyasint"`
	Parts        []wirePart        `cbor:"6,keyasint"`
	Committables map[string][]byte `cbor:"7,keyasint"`
}

// Metadata without key 8 (of older builds, versions 1 and 2) reads with
// every Base 0; bases that name an unlisted part or a checkpoint that is
// not older are corrupt.
func TestCheckpointDeltaMetadataDecoding(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "meta.db"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	parts := []wirePart{{Name: "op/a/0", Size: 10, CRC: 7}, {Name: "src/in/0", Size: 3, CRC: 9}}
	read := func(rec []byte) (*ckptRecord, error) {
		t.Helper()
		var r *ckptRecord
		var rerr error
		require.NoError(t, db.Update(func(tx *bolt.Tx) error {
			root, err := tx.CreateBucketIfNotExists(bktCheckpoints)
			require.NoError(t, err)
			cb, err := root.CreateBucketIfNotExists(ckptKey(5))
			require.NoError(t, err)
			require.NoError(t, cb.Put(keyMeta, rec))
			r, rerr = readMeta(tx, 5)
			return nil
		}))
		return r, rerr
	}
	for _, version := range []byte{1, filesFormatVersion} {
		rec, err := encodeRecordVersion(recMeta, version, oldWireMeta{ID: 5, Pipeline: "p", Parts: parts})
		require.NoError(t, err)
		r, err := read(rec)
		require.NoError(t, err, "version %d", version)
		require.Equal(t, []PartInfo{{Name: "op/a/0", Size: 10, CRC32C: 7}, {Name: "src/in/0", Size: 3, CRC32C: 9}}, r.parts)
	}

	for _, tc := range []struct {
		bases map[string]int64
		err   string // "" for none
	}{
		{bases: map[string]int64{"op/a/0": 4}},
		{bases: map[string]int64{"op/a/0": 1, "src/in/0": 2}},
		{bases: map[string]int64{"op/b/0": 4}, err: `metadata gives a base to part "op/b/0", which it does not list`},
		{bases: map[string]int64{"op/a/0": 5}, err: `metadata gives part "op/a/0" the base checkpoint 5, not an older checkpoint`},
		{bases: map[string]int64{"op/a/0": 6}, err: "the base checkpoint 6"},
		{bases: map[string]int64{"op/a/0": 0}, err: "the base checkpoint 0"},
		{bases: map[string]int64{"op/a/0": -1}, err: "the base checkpoint -1"},
	} {
		rec, err := encodeRecordVersion(recMeta, deltaFormatVersion, wireMeta{ID: 5, Parts: parts, Bases: tc.bases})
		require.NoError(t, err)
		r, err := read(rec)
		if tc.err != "" {
			require.ErrorIs(t, err, ErrCorrupt, "%v", tc.bases)
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err, "%v", tc.bases)
		for _, pi := range r.parts {
			require.Equal(t, tc.bases[pi.Name], pi.Base, pi.Name)
		}
	}
}

// Create with a base refuses a base that is not an older completed checkpoint of
// the store with that part (ErrDeltaBase), leaving the name free for
// Create, and holds no pin then.
func TestCheckpointCreateDeltaErrors(t *testing.T) {
	dir := t.TempDir()
	s := openDeltaStore(t, dir, Options{Retain: 3})
	writeDelta(t, s, 2, deltaPart{name: "op/a/0", blob: opaque(2, "op/a/0")})
	p3 := beginDelta(t, s, 3, deltaPart{name: "op/a/0", blob: opaque(3, "op/a/0")}) // pending: incomplete
	p4, err := s.Begin(4, Meta{})
	require.NoError(t, err)
	for _, tc := range []struct {
		part string
		base int64
		err  string
	}{
		{"op/a/0", 1, "checkpoint 1 is not a completed checkpoint of the store"},
		{"op/a/0", 3, "checkpoint 3 is not a completed checkpoint of the store"},
		{"op/b/0", 2, `checkpoint 2 has no part "op/b/0"`},
		{"op/a/0", 4, "not an older checkpoint"},
		{"op/a/0", 9, "not an older checkpoint"},
		{"op/a/0", -2, "not an older checkpoint"},
	} {
		_, err := p4.Create(tc.part, tc.base)
		require.ErrorIs(t, err, ErrDeltaBase, "%s on %d", tc.part, tc.base)
		require.ErrorContains(t, err, tc.err)
		require.ErrorContains(t, err, fmt.Sprintf("create part %q of checkpoint 4 as a delta on checkpoint %d", tc.part, tc.base))
	}
	require.Equal(t, 0, pinCount(s), "a refused Create with a base holds no pin")

	// The name is free: the caller writes the part whole.
	w, err := p4.Create("op/a/0", 0)
	require.NoError(t, err)
	_, err = w.Write([]byte("whole"))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	// A name taken is ErrDuplicatePart, with no pin left behind.
	_, err = p4.Create("op/a/0", 2)
	require.ErrorIs(t, err, ErrDuplicatePart)
	require.NotErrorIs(t, err, ErrDeltaBase)
	require.Equal(t, 0, pinCount(s))
	require.NoError(t, p4.Complete(context.Background()))
	require.NoError(t, p3.Abort())

	// A base that retention deleted is refused too.
	s1 := openDeltaStore(t, t.TempDir(), Options{Retain: 1})
	writeDelta(t, s1, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
	writeDelta(t, s1, 2, deltaPart{name: "op/a/0", blob: opaque(2, "op/a/0")})
	require.Equal(t, []int64{2}, completeIDs(t, s1))
	p, err := s1.Begin(3, Meta{})
	require.NoError(t, err)
	_, err = p.Create("op/a/0", 1)
	require.ErrorIs(t, err, ErrDeltaBase)
	w, err = p.Create("op/a/0", 2)
	require.NoError(t, err)
	w.Abort()
	require.Equal(t, 1, pinCount(s1), "the pending checkpoint pins its base")
	require.ErrorIs(t, p.Complete(context.Background()), ErrFailed)
	require.NoError(t, p.Abort())
	require.Equal(t, 0, pinCount(s1), "a failed checkpoint releases its bases")
}

// With Retain 1, a chain full(1) <- delta(2) <- delta(3) keeps 1 and 2
// (and their part files) while 3 is the newest, also across a reopen;
// a new full checkpoint lets the chain go.
func TestCheckpointDeltaRetention(t *testing.T) {
	dir := t.TempDir()
	s := openDeltaStore(t, dir, Options{Retain: 1})
	writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")}, deltaPart{name: "op/a/1", blob: opaque(1, "op/a/1")})
	writeDelta(t, s, 2, deltaPart{name: "op/a/0", base: 1, blob: opaque(2, "op/a/0")}, deltaPart{name: "op/a/1", blob: opaque(2, "op/a/1")})
	require.Equal(t, []int64{2, 1}, completeIDs(t, s))
	writeDelta(t, s, 3, deltaPart{name: "op/a/0", base: 2, blob: opaque(3, "op/a/0")}, deltaPart{name: "op/a/1", blob: opaque(3, "op/a/1")})
	require.Equal(t, []int64{3, 2, 1}, completeIDs(t, s))
	require.Equal(t, []int64{3, 2, 1}, fileDirIDs(t, s))

	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(3), cp.ID())
	require.NoError(t, cp.Close())

	require.NoError(t, s.Close(context.Background()))
	s = openDeltaStore(t, dir, Options{Retain: 1})
	require.Equal(t, []int64{3, 2, 1}, completeIDs(t, s), "open's retention keeps the chain")
	require.Equal(t, []int64{3, 2, 1}, fileDirIDs(t, s))

	// 4's op/a/1 is a delta on 3's, which is whole; but 3 is kept, and 3
	// needs its own chains: 2 and 1 stay too.
	writeDelta(t, s, 4, deltaPart{name: "op/a/0", blob: opaque(4, "op/a/0")}, deltaPart{name: "op/a/1", base: 3, blob: opaque(4, "op/a/1")})
	require.Equal(t, []int64{4, 3, 2, 1}, completeIDs(t, s))
	require.Equal(t, []int64{4, 3, 2, 1}, fileDirIDs(t, s))
	writeDelta(t, s, 5, deltaPart{name: "op/a/0", blob: opaque(5, "op/a/0")}, deltaPart{name: "op/a/1", blob: opaque(5, "op/a/1")})
	require.Equal(t, []int64{5}, completeIDs(t, s))
	require.Equal(t, []int64{5}, fileDirIDs(t, s))
}

// A pending checkpoint's delta part keeps its base while newer
// checkpoints complete; once it completes, its metadata keeps the base as
// long as it is retained, and an aborted one lets the base go.
func TestCheckpointDeltaPendingKeepsBase(t *testing.T) {
	t.Run("completed", func(t *testing.T) {
		s := openDeltaStore(t, t.TempDir(), Options{Retain: 2})
		writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
		p2 := beginDelta(t, s, 2, deltaPart{name: "op/a/0", base: 1, blob: opaque(2, "op/a/0")})
		writeDelta(t, s, 3, deltaPart{name: "op/a/0", blob: opaque(3, "op/a/0")})
		writeDelta(t, s, 4, deltaPart{name: "op/a/0", blob: opaque(4, "op/a/0")})
		complete, incomplete := ListIDs(t, s)
		require.Equal(t, []int64{4, 3, 1}, complete, "1 stays as the base of pending 2")
		require.Equal(t, []int64{2}, incomplete)
		require.Equal(t, []int64{4, 3, 2, 1}, fileDirIDs(t, s))
		require.NoError(t, p2.Complete(context.Background()))
		// Completed out of order, 2 is not among the newest 2: it goes, and
		// its base with it.
		require.Equal(t, []int64{4, 3}, completeIDs(t, s))
		require.Equal(t, []int64{4, 3}, fileDirIDs(t, s))
		require.Equal(t, 0, pinCount(s))
	})
	t.Run("retained", func(t *testing.T) {
		s := openDeltaStore(t, t.TempDir(), Options{Retain: 2})
		writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
		p2 := beginDelta(t, s, 2, deltaPart{name: "op/a/0", base: 1, blob: opaque(2, "op/a/0")})
		writeDelta(t, s, 3, deltaPart{name: "op/a/0", blob: opaque(3, "op/a/0")})
		require.NoError(t, p2.Complete(context.Background()))
		require.Equal(t, []int64{3, 2, 1}, completeIDs(t, s), "1 stays as the base of 2")
		require.Equal(t, 0, pinCount(s), "the completed checkpoint's metadata keeps its base, not a pin")
		cp, err := s.Checkpoint(context.Background(), 2)
		require.NoError(t, err, "2 verifies with its chain")
		require.NoError(t, cp.Close())
		writeDelta(t, s, 4, deltaPart{name: "op/a/0", blob: opaque(4, "op/a/0")})
		require.Equal(t, []int64{4, 3}, completeIDs(t, s))
	})
	t.Run("aborted", func(t *testing.T) {
		s := openDeltaStore(t, t.TempDir(), Options{Retain: 1})
		writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
		p2 := beginDelta(t, s, 2, deltaPart{name: "op/a/0", base: 1, blob: opaque(2, "op/a/0")})
		writeDelta(t, s, 3, deltaPart{name: "op/a/0", blob: opaque(3, "op/a/0")})
		complete, incomplete := ListIDs(t, s)
		require.Equal(t, []int64{3, 1}, complete, "1 stays as the base of pending 2")
		require.Equal(t, []int64{2}, incomplete)
		require.NoError(t, p2.Abort())
		require.Equal(t, 0, pinCount(s))
		writeDelta(t, s, 4, deltaPart{name: "op/a/0", blob: opaque(4, "op/a/0")})
		require.Equal(t, []int64{4}, completeIDs(t, s))
		require.Equal(t, []int64{4}, fileDirIDs(t, s))
	})
}

// writeChain writes a real incremental chain of n checkpoints (ids 1..n)
// to s: each "op/a/0" is a part of statestoretest.ChainParts (a whole
// part, then deltas, each on the checkpoint before), each "op/a/1" a whole
// part. It returns
// the parts and the full snapshot of the state at checkpoint n.
func writeChain(t *testing.T, s *Store, n int) (parts [][]byte, want []byte) {
	t.Helper()
	parts, want = statestoretest.ChainParts(t, n)
	for i, blob := range parts {
		id := int64(i + 1)
		writeDelta(t, s, id, deltaPart{name: "op/a/0", base: id - 1, blob: blob}, deltaPart{name: "op/a/1", blob: opaque(id, "op/a/1")})
	}
	return parts, want
}

// Get and Prefix return a delta part merged with its chain: the bytes a
// full snapshot of the checkpoint's state writes; every checkpoint of the
// chain reads its own state. A Checkpoint keeps its chain from retention
// until it is closed.
func TestCheckpointDeltaGet(t *testing.T) {
	dir := t.TempDir()
	s := openDeltaStore(t, dir, Options{Retain: 1})
	parts, want := writeChain(t, s, 3)
	require.Equal(t, []int64{3, 2, 1}, completeIDs(t, s))

	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(3), cp.ID())
	got, err := cp.Get("op/a/0")
	require.NoError(t, err)
	require.Equal(t, want, got, "the merged chain is the full snapshot")
	var names []string
	for name, blob := range cp.Prefix("op/a/") {
		names = append(names, name)
		switch name {
		case "op/a/0":
			require.Equal(t, want, blob)
		case "op/a/1":
			require.Equal(t, opaque(3, "op/a/1"), blob)
		}
	}
	require.NoError(t, cp.Err())
	require.Equal(t, []string{"op/a/0", "op/a/1"}, names)

	for id, wantPart := range map[int64][][]byte{1: parts[:1], 2: parts[:2]} {
		cp, err := s.Checkpoint(context.Background(), id)
		require.NoError(t, err)
		merged, err := statestore.MergeChain(wantPart)
		require.NoError(t, err)
		got, err := cp.Get("op/a/0")
		require.NoError(t, err)
		require.Equal(t, merged, got, "checkpoint %d", id)
		require.NoError(t, cp.Close())
	}

	// The open Checkpoint 3 keeps 1 and 2 while newer ones complete.
	writeDelta(t, s, 4, deltaPart{name: "op/a/0", blob: opaque(4, "op/a/0")})
	writeDelta(t, s, 5, deltaPart{name: "op/a/0", blob: opaque(5, "op/a/0")})
	require.Equal(t, []int64{5, 3, 2, 1}, completeIDs(t, s))
	got, err = cp.Get("op/a/0")
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, cp.Close())
	writeDelta(t, s, 6, deltaPart{name: "op/a/0", blob: opaque(6, "op/a/0")})
	require.Equal(t, []int64{6}, completeIDs(t, s))
	require.Equal(t, []int64{6}, fileDirIDs(t, s))
}

// Inspection reads a delta part merged, and says which part of the chain
// is corrupt.
func TestCheckpointDeltaInspect(t *testing.T) {
	dir := t.TempDir()
	s := openDeltaStore(t, dir, Options{Retain: 1})
	parts, want := writeChain(t, s, 3)
	require.NoError(t, s.Close(context.Background()))

	f, err := OpenFile(filepath.Join(dir, FileName), 0)
	require.NoError(t, err)
	defer f.Close()
	list, err := f.List()
	require.NoError(t, err)
	require.Len(t, list, 3)
	require.Equal(t, []bool{true, true, false}, []bool{list[0].Incremental, list[1].Incremental, list[2].Incremental})
	cp, err := f.Checkpoint(3)
	require.NoError(t, err)
	pi := cp.Parts()[0]
	require.Equal(t, "op/a/0", pi.Name)
	require.Equal(t, int64(2), pi.Base)
	require.Equal(t, int64(len(parts[2])), pi.Size)
	got, err := cp.Get("op/a/0")
	require.NoError(t, err)
	require.Equal(t, want, got)
	groups, err := statestore.InspectState(got)
	require.NoError(t, err)
	require.NotEmpty(t, groups)

	flipPartFile(t, dir, 1, "op/a/0")
	_, err = cp.Get("op/a/0")
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, `checkpoint 3: part "op/a/0": the chain's part in checkpoint 1: corrupt checkpoint: part "op/a/0": checksum`)
}

// partFile returns the path of the file of part name of checkpoint id in
// the closed store in dir.
func partFilePath(t *testing.T, dir string, id int64, name string) string {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var path string
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		_, p, err := partLocation(tx.Bucket(bktCheckpoints).Bucket(ckptKey(id)), filepath.Join(dir, PartsDir), id, name)
		path = p
		return err
	}))
	require.NotEmpty(t, path, "part %q of checkpoint %d is not in a file", name, id)
	return path
}

// flipPartFile flips a byte in the middle of a part's file.
func flipPartFile(t *testing.T, dir string, id int64, name string) {
	t.Helper()
	path := partFilePath(t, dir, id, name)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x20
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// damageStore changes the closed store in dir through bbolt.
func damageStore(t *testing.T, dir string, fn func(root *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(bktCheckpoints)) }))
	require.NoError(t, db.Close())
}

// Latest verifies the chains of a checkpoint's delta parts: when a base
// is damaged or gone, it falls back past every checkpoint that needs it,
// saying which and why, to one that does not.
func TestCheckpointDeltaLatestFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		reason string // in each warning
	}{
		{
			name:   "flipped byte in the base's part file",
			damage: func(t *testing.T, dir string) { flipPartFile(t, dir, 1, "op/a/0") },
			reason: `the chain's part in checkpoint 1 does not verify: corrupt checkpoint: part \"op/a/0\": checksum`,
		},
		{
			name: "base's part file missing",
			damage: func(t *testing.T, dir string) {
				require.NoError(t, os.Remove(partFilePath(t, dir, 1, "op/a/0")))
			},
			reason: `the chain's part in checkpoint 1 does not verify: corrupt checkpoint: the file of part \"op/a/0\" is missing`,
		},
		{
			name: "base deleted",
			damage: func(t *testing.T, dir string) {
				damageStore(t, dir, func(root *bolt.Bucket) error { return root.DeleteBucket(ckptKey(1)) })
			},
			reason: `is a delta on checkpoint 1: corrupt checkpoint: checkpoint 1 is missing or incomplete`,
		},
		{
			name: "base's metadata damaged",
			damage: func(t *testing.T, dir string) {
				damageStore(t, dir, func(root *bolt.Bucket) error {
					cb := root.Bucket(ckptKey(1))
					rec := slices.Clone(cb.Get(keyMeta))
					rec[len(rec)/2] ^= 1
					return cb.Put(keyMeta, rec)
				})
			},
			reason: `is a delta on checkpoint 1: checkpoint 1: metadata: corrupt checkpoint: record checksum`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openDeltaStore(t, dir, Options{Retain: 4})
			// 3 is a delta on 1 and 4 on 3; 2 needs no base.
			writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
			writeDelta(t, s, 2, deltaPart{name: "op/a/0", blob: opaque(2, "op/a/0")})
			writeDelta(t, s, 3, deltaPart{name: "op/a/0", base: 1, blob: opaque(3, "op/a/0")})
			writeDelta(t, s, 4, deltaPart{name: "op/a/0", base: 3, blob: opaque(4, "op/a/0")})
			cp, err := s.Latest(context.Background())
			require.NoError(t, err)
			require.Equal(t, int64(4), cp.ID(), "the undamaged chain verifies")
			require.NoError(t, cp.Close())
			require.NoError(t, s.Close(context.Background()))

			tc.damage(t, dir)
			var log LogBuffer
			s = openDeltaStore(t, dir, Options{Retain: 4, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			cp, err = s.Latest(context.Background())
			require.NoError(t, err)
			require.Equal(t, int64(2), cp.ID())
			require.NoError(t, cp.Close())
			lines := slices.DeleteFunc(bytes.Split([]byte(log.String()), []byte("\n")), func(l []byte) bool { return len(l) == 0 })
			require.Len(t, lines, 2, log.String())
			for i, id := range []int64{4, 3} {
				line := string(lines[i])
				require.Contains(t, line, "level=WARN")
				require.Contains(t, line, "checkpoint="+strconv.FormatInt(id, 10)+" ")
				require.Contains(t, line, "fallback="+strconv.FormatInt(id-1, 10))
				require.Contains(t, line, tc.reason)
				require.Contains(t, line, `part \"op/a/0\"`)
			}

			_, err = s.Checkpoint(context.Background(), 4)
			require.ErrorIs(t, err, ErrCorrupt)
			require.NotErrorIs(t, err, ErrNoCheckpoint, "a missing base does not say that the store is empty")
			require.ErrorIs(t, s.ExportSavepoint(4, filepath.Join(t.TempDir(), "sp")), ErrCorrupt)
		})
	}
}

// Complete checks in its transaction that every base is still complete,
// and fails otherwise: a base deleted behind the store's back is never
// referenced.
func TestCheckpointDeltaCompleteRechecksBase(t *testing.T) {
	s := openDeltaStore(t, t.TempDir(), Options{Retain: 3})
	writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
	p := beginDelta(t, s, 2, deltaPart{name: "op/a/0", base: 1, blob: opaque(2, "op/a/0")})
	require.NoError(t, s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bktCheckpoints).Bucket(ckptKey(1)).Delete(keyMeta)
	}))
	err := p.Complete(context.Background())
	require.ErrorIs(t, err, ErrDeltaBase)
	require.ErrorContains(t, err, `part "op/a/0" is a delta on checkpoint 1`)
	require.NoError(t, p.Abort())
	require.Equal(t, 0, pinCount(s))
	complete, _ := ListIDs(t, s)
	require.Empty(t, complete)
}

// A savepoint of a checkpoint with delta parts holds them merged, as whole
// parts, with metadata (version 1, no key 8) that lists them so;
// OpenSavepoint reads it. A savepoint file that holds a delta part is
// corrupt.
func TestCheckpointDeltaSavepoint(t *testing.T) {
	s := openDeltaStore(t, t.TempDir(), Options{Retain: 1})
	_, want := writeChain(t, s, 3)
	path := filepath.Join(t.TempDir(), "sp")
	require.NoError(t, s.ExportSavepoint(3, path))

	sp, err := OpenSavepoint(path)
	require.NoError(t, err)
	require.Equal(t, int64(3), sp.ID())
	wantParts := []PartInfo{
		{Name: "op/a/0", Size: int64(len(want)), CRC32C: crc32.Checksum(want, crcTable)},
		{Name: "op/a/1", Size: int64(len(opaque(3, "op/a/1"))), CRC32C: crc32.Checksum(opaque(3, "op/a/1"), crcTable)},
		{Name: "src/in/0", Size: int64(len(opaque(3, "src/in/0"))), CRC32C: crc32.Checksum(opaque(3, "src/in/0"), crcTable)},
	}
	require.Equal(t, wantParts, sp.Parts())
	got, err := sp.Get("op/a/0")
	require.NoError(t, err)
	require.Equal(t, want, got)
	got, err = sp.Get("src/in/0")
	require.NoError(t, err)
	require.Equal(t, opaque(3, "src/in/0"), got)
	orig, err := s.Checkpoint(context.Background(), 3)
	require.NoError(t, err)
	require.Equal(t, orig.Meta(), sp.Meta())
	require.Equal(t, orig.CompletedAt(), sp.CompletedAt())
	require.NoError(t, orig.Close())
	require.NoError(t, sp.Close())

	db, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		cb := tx.Bucket(bktCheckpoints).Bucket(ckptKey(3))
		rec := cb.Get(keyMeta)
		require.Equal(t, byte(1), rec[4])
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, metaKeys(t, rec))
		require.Nil(t, cb.Bucket(bktFiles))
		// A delta part in a savepoint, as no export writes it.
		var m wireMeta
		require.NoError(t, decodeRecord(recMeta, rec, &m))
		m.Bases = map[string]int64{"op/a/0": 2}
		bad, err := encodeRecordVersion(recMeta, deltaFormatVersion, m)
		require.NoError(t, err)
		return cb.Put(keyMeta, bad)
	}))
	require.NoError(t, db.Close())
	_, err = OpenSavepoint(path)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, `part "op/a/0" is a delta on checkpoint 2, which a savepoint cannot have`)
}

// A fault while a delta part is written fails the checkpoint as it does
// while a whole part is written: the same error, the previous checkpoint
// stays the latest, nothing of the failed one is left, and its base is
// no longer pinned.
func TestCheckpointDeltaPartFaults(t *testing.T) {
	errDisk := errors.New("injected failure")
	isPart := func(id int64, part string) bool { return id == 2 && part == "op/a/0" }
	inDir2 := func(path string) bool {
		return filepath.Base(filepath.Dir(path)) == "2" || filepath.Base(path) == "2"
	}
	for _, tc := range []struct {
		name   string
		faults FaultFuncs
		err    error
	}{
		{"full disk on a write", FaultFuncs{BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
			if isPart(id, part) {
				return nil, syscall.ENOSPC
			}
			return blob, nil
		}}, syscall.ENOSPC},
		{"torn write that loses bytes", FaultFuncs{BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
			if isPart(id, part) {
				return blob[:len(blob)/2], nil
			}
			return blob, nil
		}}, ErrCorrupt},
		{"failed create", FaultFuncs{FileFunc: func(op Op, path string) error {
			if op == OpPartCreate && inDir2(path) {
				return syscall.EACCES
			}
			return nil
		}}, syscall.EACCES},
		{"failed fsync of the part", FaultFuncs{FileFunc: func(op Op, path string) error {
			if op == OpPartSync && inDir2(path) {
				return errDisk
			}
			return nil
		}}, errDisk},
		{"failed fsync of the directory", FaultFuncs{FileFunc: func(op Op, path string) error {
			if op == OpPartSyncDir && inDir2(path) {
				return errDisk
			}
			return nil
		}}, errDisk},
		{"failed fsync of the completion", FaultFuncs{CommitFunc: func(op Op, id int64, _ string) error {
			if op == OpComplete && id == 2 {
				return errDisk
			}
			return nil
		}}, errDisk},
	} {
		for _, delta := range []bool{false, true} {
			name := tc.name + "/whole"
			if delta {
				name = tc.name + "/delta"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				s := openDeltaStore(t, dir, Options{Retain: 2, Faults: tc.faults})
				writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})

				p, err := s.Begin(2, Meta{})
				require.NoError(t, err)
				err = func() error {
					var w PartWriter
					var err error
					if delta {
						w, err = p.Create("op/a/0", 1)
					} else {
						w, err = p.Create("op/a/0", 0)
					}
					if err != nil {
						return err
					}
					if _, err := w.Write(opaque(2, "op/a/0")); err != nil {
						w.Abort()
						return err
					}
					if err := w.Close(); err != nil {
						return err
					}
					return p.Complete(context.Background())
				}()
				require.ErrorIs(t, err, tc.err)
				require.NotErrorIs(t, err, ErrDeltaBase)
				require.NoError(t, p.Abort())
				require.Equal(t, 0, pinCount(s))
				complete, incomplete := ListIDs(t, s)
				require.Equal(t, []int64{1}, complete)
				require.Empty(t, incomplete)
				require.Equal(t, []int64{1}, fileDirIDs(t, s), "the failed checkpoint's files are removed")
				cp, err := s.Latest(context.Background())
				require.NoError(t, err)
				require.Equal(t, int64(1), cp.ID())
				require.NoError(t, cp.Close())
			})
		}
	}
}

// Delta parts written from several goroutines while checkpoints complete
// and retention (Retain 1) deletes: a base that Create with a base accepts is
// never lost, so every Complete after an accepted Create with a base succeeds,
// and every retained checkpoint verifies with its chains.
func TestCheckpointDeltaConcurrentRetention(t *testing.T) {
	s := openDeltaStore(t, t.TempDir(), Options{Retain: 1})
	writeDelta(t, s, 1, deltaPart{name: "op/a/0", blob: opaque(1, "op/a/0")})
	var (
		mu       sync.Mutex
		next     = int64(2)
		newest   = int64(1)
		accepted int
		refused  int
	)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 25 {
				mu.Lock()
				id, base := next, newest
				next++
				mu.Unlock()
				p, err := s.Begin(id, Meta{})
				if errors.Is(err, ErrID) {
					continue // a newer one completed first
				}
				if err != nil {
					errs <- err
					return
				}
				w, err := p.Create("op/a/0", base)
				delta := err == nil
				if errors.Is(err, ErrDeltaBase) {
					w, err = p.Create("op/a/0", 0)
				}
				if err == nil {
					_, err = w.Write(opaque(id, "op/a/0"))
				}
				if err == nil {
					err = w.Close()
				}
				if err == nil {
					err = p.Complete(context.Background())
				}
				if err != nil {
					errs <- fmt.Errorf("checkpoint %d (delta on %d: %t): %w", id, base, delta, errors.Join(err, p.Abort()))
					return
				}
				mu.Lock()
				newest = max(newest, id)
				if delta {
					accepted++
				} else {
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d delta parts, %d refused bases", accepted, refused)
	require.Positive(t, accepted)
	require.Equal(t, 0, pinCount(s))
	complete := completeIDs(t, s)
	require.NotEmpty(t, complete)
	for _, id := range complete {
		cp, err := s.Checkpoint(context.Background(), id)
		require.NoError(t, err, "checkpoint %d", id)
		require.NoError(t, cp.Close())
	}
}

// The metadata record keeps key 7, where eddy never stored anything but
// nil (sinks' committables are parts), so that its encoding is what it
// always was; a record with values under it reads.
func TestCheckpointMetadataKeepsKey7(t *testing.T) {
	s := openDeltaStore(t, t.TempDir(), Options{})
	p, err := s.Begin(1, Meta{Pipeline: "p"})
	require.NoError(t, err)
	require.NoError(t, p.Put("src/in/0", []byte("x")))
	require.NoError(t, p.Complete(context.Background()))
	require.NoError(t, s.db.View(func(tx *bolt.Tx) error {
		var m map[int]any
		require.NoError(t, decodeRecord(recMeta, tx.Bucket(bktCheckpoints).Bucket(ckptKey(1)).Get(keyMeta), &m))
		require.Contains(t, m, 7)
		require.Nil(t, m[7])
		require.Len(t, m, 7, "keys 1 to 7, no 8 without delta parts")
		return nil
	}))

	db, err := bolt.Open(filepath.Join(t.TempDir(), "meta.db"), 0o600, nil)
	require.NoError(t, err)
	defer db.Close()
	rec, err := encodeRecordVersion(recMeta, 1, oldWireMeta{ID: 5, Pipeline: "p", Parts: []wirePart{{Name: "src/in/0", Size: 1, CRC: 3}},
		Committables: map[string][]byte{"sink/out/0": []byte("txn")}})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bktCheckpoints)
		require.NoError(t, err)
		cb, err := root.CreateBucketIfNotExists(ckptKey(5))
		require.NoError(t, err)
		require.NoError(t, cb.Put(keyMeta, rec))
		r, err := readMeta(tx, 5)
		require.NoError(t, err)
		require.Equal(t, "p", r.meta.Pipeline)
		require.Equal(t, []PartInfo{{Name: "src/in/0", Size: 1, CRC32C: 3}}, r.parts)
		return nil
	}))
}
