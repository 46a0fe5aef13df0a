package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/eddy-stream/eddy/checkpoint"
)

// logBuffer collects slog output from any goroutine.
type logBuffer = checkpoint.LogBuffer

func openStore(t testing.TB, dir string, opts checkpoint.Options) *checkpoint.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := checkpoint.Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// partBlob is the deterministic content of part of checkpoint id: a
// header naming both (unique in the file), then filler.
func partBlob(id int64, part string, size int) []byte {
	b := make([]byte, 0, size)
	b = fmt.Appendf(b, "<ckpt %d %s>", id, part)
	for i := 0; len(b) < size; i++ {
		b = append(b, byte('a'+(int(id)+i+len(part))%26))
	}
	return b
}

// testParts are the parts each test checkpoint has.
var testParts = []string{"op/agg/0", "op/agg/1", "op/agg/2", "sink/out/0", "src/in/0", "src/in/1"}

func partSize(i int) int { return 100 + i*1500 }

// writeCheckpoint writes checkpoint id with testParts, from one goroutine
// per part.
func writeCheckpoint(t testing.TB, s *checkpoint.Store, id int64) {
	t.Helper()
	p, err := s.Begin(id, checkpoint.Meta{
		Pipeline: "test",
		FileHash: "sha256:" + strconv.FormatInt(id, 16),
	})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, len(testParts))
	for i, part := range testParts {
		wg.Go(func() { errs[i] = p.Put(part, partBlob(id, part, partSize(i))) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, p.Complete(context.Background()))
}

// requireCheckpoint checks that cp is checkpoint id as writeCheckpoint
// wrote it.
func requireCheckpoint(t testing.TB, cp *checkpoint.Checkpoint, id int64) {
	t.Helper()
	require.Equal(t, id, cp.ID())
	require.Equal(t, "test", cp.Meta().Pipeline)
	require.Equal(t, "sha256:"+strconv.FormatInt(id, 16), cp.Meta().FileHash)
	var names []string
	for _, pi := range cp.Parts() {
		names = append(names, pi.Name)
	}
	require.Equal(t, slices.Sorted(slices.Values(testParts)), names)
	for i, part := range testParts {
		blob, err := cp.Get(part)
		require.NoError(t, err)
		require.Equal(t, partBlob(id, part, partSize(i)), blob, part)
	}
}

func latestID(t testing.TB, s *checkpoint.Store) int64 {
	t.Helper()
	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	defer cp.Close()
	requireCheckpoint(t, cp, cp.ID())
	return cp.ID()
}

// listIDs lists the store's completed and incomplete checkpoints, newest
// first.
var listIDs = checkpoint.ListIDs

func TestCheckpointRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, checkpoint.Options{})
	require.Equal(t, filepath.Join(dir, "checkpoints.db"), s.Path())

	_, err := s.Latest(context.Background())
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)

	trigger := time.Unix(0, time.Now().Add(-time.Hour).UnixNano()).UTC()
	p, err := s.Begin(1, checkpoint.Meta{
		Pipeline: "sensor-stats",
		FileHash: "sha256:abc",
		Time:     trigger,
	})
	require.NoError(t, err)
	want := map[string][]byte{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 4 {
		wg.Go(func() {
			for i := range 8 {
				part := fmt.Sprintf("op/step%d/%d", g, i)
				blob := partBlob(1, part, 1000*i)
				assert.NoError(t, p.Put(part, blob))
				mu.Lock()
				want[part] = blob
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, p.Put("src/in/0", nil)) // an empty part
	want["src/in/0"] = []byte{}

	// Not visible before Complete.
	infos, err := s.List()
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.False(t, infos[0].Complete)
	require.Equal(t, 33, infos[0].Parts)
	require.Equal(t, trigger, infos[0].Time.UTC())
	_, err = s.Latest(context.Background())
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)

	require.NoError(t, p.Complete(context.Background()))
	require.ErrorIs(t, p.Put("late", nil), checkpoint.ErrFinished)
	require.ErrorIs(t, p.Complete(context.Background()), checkpoint.ErrFinished)
	require.NoError(t, p.Abort(), "abort after complete is a no-op")

	check := func(s *checkpoint.Store) {
		cp, err := s.Latest(context.Background())
		require.NoError(t, err)
		defer cp.Close()
		require.Equal(t, int64(1), cp.ID())
		require.Equal(t, "sensor-stats", cp.Meta().Pipeline)
		require.Equal(t, "sha256:abc", cp.Meta().FileHash)
		require.Equal(t, trigger, cp.Meta().Time.UTC())
		require.False(t, cp.CompletedAt().Before(trigger))
		var names []string
		var size int64
		for _, pi := range cp.Parts() {
			names = append(names, pi.Name)
			size += pi.Size
			require.Equal(t, int64(len(want[pi.Name])), pi.Size)
		}
		require.Equal(t, slices.Sorted(maps.Keys(want)), names)
		require.Equal(t, size, cp.Size())
		for part, blob := range want {
			got, err := cp.Get(part)
			require.NoError(t, err)
			require.Equal(t, blob, got, part)
		}
		_, err = cp.Get("op/nope")
		require.ErrorIs(t, err, checkpoint.ErrPartNotFound)

		var got []string
		for part, blob := range cp.Prefix("op/step2/") {
			require.Equal(t, want[part], blob)
			got = append(got, part)
		}
		require.NoError(t, cp.Err())
		require.Equal(t, []string{"op/step2/0", "op/step2/1", "op/step2/2", "op/step2/3", "op/step2/4", "op/step2/5", "op/step2/6", "op/step2/7"}, got)
		for range cp.Prefix("op/") {
			break // stopping early is fine
		}
		for part := range cp.Prefix("zzz") {
			t.Fatalf("unexpected part %q", part)
		}

		infos, err := s.List()
		require.NoError(t, err)
		require.Equal(t, []checkpoint.Info{{ID: 1, Time: infos[0].Time, Pipeline: "sensor-stats", Size: size, Parts: 33, Complete: true}}, infos)
	}
	check(s)
	require.NoError(t, s.Close(context.Background()))
	require.NoError(t, s.Close(context.Background()), "second Close")
	check(openStore(t, dir, checkpoint.Options{}))
}

func TestCheckpointWithoutParts(t *testing.T) {
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	p, err := s.Begin(7, checkpoint.Meta{Pipeline: "p"})
	require.NoError(t, err)
	require.NoError(t, p.Complete(context.Background()))
	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	defer cp.Close()
	require.Equal(t, int64(7), cp.ID())
	require.Empty(t, cp.Parts())
}

func TestCheckpointBeginAndPutErrors(t *testing.T) {
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	_, err := s.Begin(0, checkpoint.Meta{})
	require.ErrorIs(t, err, checkpoint.ErrID)
	_, err = s.Begin(-3, checkpoint.Meta{})
	require.ErrorIs(t, err, checkpoint.ErrID)

	writeCheckpoint(t, s, 5)
	for _, id := range []int64{5, 3} {
		_, err = s.Begin(id, checkpoint.Meta{})
		require.ErrorIs(t, err, checkpoint.ErrID, "id %d", id)
	}
	p, err := s.Begin(6, checkpoint.Meta{})
	require.NoError(t, err)
	_, err = s.Begin(6, checkpoint.Meta{})
	require.ErrorIs(t, err, checkpoint.ErrID)

	require.ErrorIs(t, p.Put("", []byte("x")), checkpoint.ErrInvalidPart)
	require.ErrorIs(t, p.Put(strings.Repeat("x", checkpoint.MaxPartNameLen+1), []byte("x")), checkpoint.ErrInvalidPart)
	require.NoError(t, p.Put("a", []byte("x")))
	require.ErrorIs(t, p.Put("a", []byte("y")), checkpoint.ErrDuplicatePart)
	require.NoError(t, p.Abort())
	require.NoError(t, p.Abort(), "second Abort")
	require.ErrorIs(t, p.Put("b", nil), checkpoint.ErrFinished)
	require.ErrorIs(t, p.Complete(context.Background()), checkpoint.ErrFinished)

	// An aborted id may be begun again.
	writeCheckpoint(t, s, 6)
	require.Equal(t, int64(6), latestID(t, s))
}

func TestCheckpointAbortDeletesData(t *testing.T) {
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	writeCheckpoint(t, s, 1)
	p, err := s.Begin(2, checkpoint.Meta{})
	require.NoError(t, err)
	require.NoError(t, p.Put("op/a/0", make([]byte, 100_000)))
	complete, incomplete := listIDs(t, s)
	require.Equal(t, []int64{1}, complete)
	require.Equal(t, []int64{2}, incomplete)
	require.Equal(t, int64(1), latestID(t, s))
	require.NoError(t, p.Abort())
	complete, incomplete = listIDs(t, s)
	require.Equal(t, []int64{1}, complete)
	require.Empty(t, incomplete)
}

func TestCheckpointRetention(t *testing.T) {
	logs := &logBuffer{}
	s := openStore(t, t.TempDir(), checkpoint.Options{Retain: 2, Logger: logs.Logger()})
	for id := int64(1); id <= 5; id++ {
		writeCheckpoint(t, s, id)
	}
	complete, _ := listIDs(t, s)
	require.Equal(t, []int64{5, 4}, complete)
	require.Contains(t, logs.String(), "checkpoints deleted by retention")

	// A Checkpoint being read is kept until it is closed.
	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(5), cp.ID())
	writeCheckpoint(t, s, 6)
	writeCheckpoint(t, s, 7)
	complete, _ = listIDs(t, s)
	require.Equal(t, []int64{7, 6, 5}, complete)
	requireCheckpoint(t, cp, 5)
	require.NoError(t, cp.Close())
	require.NoError(t, cp.Close(), "second Close")
	_, err = cp.Get(testParts[0])
	require.ErrorIs(t, err, checkpoint.ErrClosed)

	// Concurrent checkpoints: completing 9 leaves 8, still being written,
	// alone; 8 may complete after 9.
	p8, err := s.Begin(8, checkpoint.Meta{})
	require.NoError(t, err)
	require.NoError(t, p8.Put("op/a/0", []byte("eight")))
	writeCheckpoint(t, s, 9)
	complete, incomplete := listIDs(t, s)
	require.Equal(t, []int64{9, 7}, complete)
	require.Equal(t, []int64{8}, incomplete)
	require.NoError(t, p8.Complete(context.Background()))
	complete, incomplete = listIDs(t, s)
	require.Equal(t, []int64{9, 8}, complete)
	require.Empty(t, incomplete)
}

var errInjected = errors.New("injected fsync failure")

// TestCheckpointWriteFaults makes one write of checkpoint 2 fail, as a disk
// would, and checks that checkpoint 2 is never observed complete, that
// checkpoint 1 stays readable (also after reopening), and what the errors
// wrap.
func TestCheckpointWriteFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults checkpoint.FaultFuncs
		// putErr, completeErr: what Put of "op/agg/1" and Complete wrap.
		putErr, completeErr []error
	}{
		{
			name: "full disk on put",
			faults: checkpoint.FaultFuncs{BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
				if id == 2 && part == "op/agg/1" {
					return nil, syscall.ENOSPC
				}
				return blob, nil
			}},
			putErr:      []error{syscall.ENOSPC},
			completeErr: []error{checkpoint.ErrFailed, syscall.ENOSPC},
		},
		{
			name: "failed fsync of a put",
			faults: checkpoint.FaultFuncs{CommitFunc: func(op checkpoint.Op, id int64, part string) error {
				if op == checkpoint.OpPut && id == 2 && part == "op/agg/1" {
					return errInjected
				}
				return nil
			}},
			putErr:      []error{errInjected},
			completeErr: []error{checkpoint.ErrFailed, errInjected},
		},
		{
			name: "failed fsync of the completion",
			faults: checkpoint.FaultFuncs{CommitFunc: func(op checkpoint.Op, id int64, _ string) error {
				if op == checkpoint.OpComplete && id == 2 {
					return errInjected
				}
				return nil
			}},
			completeErr: []error{errInjected},
		},
		{
			name: "torn write that loses bytes",
			faults: checkpoint.FaultFuncs{BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
				if id == 2 && part == "op/agg/1" {
					return blob[:len(blob)/2], nil
				}
				return blob, nil
			}},
			completeErr: []error{checkpoint.ErrCorrupt},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, checkpoint.Options{Faults: tc.faults})
			writeCheckpoint(t, s, 1)

			p, err := s.Begin(2, checkpoint.Meta{Pipeline: "test"})
			require.NoError(t, err)
			for i, part := range testParts {
				err := p.Put(part, partBlob(2, part, partSize(i)))
				if part == "op/agg/1" && tc.putErr != nil {
					for _, want := range tc.putErr {
						require.ErrorIs(t, err, want)
					}
					require.ErrorContains(t, err, `put part "op/agg/1" of checkpoint 2`)
					// The checkpoint failed: no more parts.
					require.ErrorIs(t, p.Put("extra", nil), checkpoint.ErrFailed)
					break
				}
				require.NoError(t, err, part)
			}
			err = p.Complete(context.Background())
			for _, want := range tc.completeErr {
				require.ErrorIs(t, err, want)
			}
			require.ErrorContains(t, err, "complete checkpoint 2")

			complete, _ := listIDs(t, s)
			require.Equal(t, []int64{1}, complete, "checkpoint 2 is not complete")
			require.Equal(t, int64(1), latestID(t, s))

			require.NoError(t, p.Abort())
			complete, incomplete := listIDs(t, s)
			require.Equal(t, []int64{1}, complete)
			require.Empty(t, incomplete)

			require.NoError(t, s.Close(context.Background()))
			s = openStore(t, dir, checkpoint.Options{})
			require.Equal(t, int64(1), latestID(t, s))
			writeCheckpoint(t, s, 2) // the id was not used up
			require.Equal(t, int64(2), latestID(t, s))
		})
	}
}

// TestCheckpointTornWriteHook: a torn write that keeps the size (garbled
// bytes) is invisible to Complete, but Latest detects it and falls back.
func TestCheckpointTornWriteHook(t *testing.T) {
	logs := &logBuffer{}
	s := openStore(t, t.TempDir(), checkpoint.Options{Logger: logs.Logger(), Faults: checkpoint.FaultFuncs{
		BlobFunc: func(id int64, part string, blob []byte) ([]byte, error) {
			if id == 2 && part == "src/in/0" {
				torn := slices.Clone(blob)
				clear(torn[len(torn)/2:]) // the second half never reached the disk
				return torn, nil
			}
			return blob, nil
		},
	}})
	writeCheckpoint(t, s, 1)
	writeCheckpoint(t, s, 2)
	complete, _ := listIDs(t, s)
	require.Equal(t, []int64{2, 1}, complete)
	require.Equal(t, int64(1), latestID(t, s))
	require.Contains(t, logs.String(), "checkpoint=2")
	require.Contains(t, logs.String(), `part \"src/in/0\": checksum`)
}

// TestCheckpointGroupCommitFailure: concurrent Puts share a transaction, so
// a failed commit fails every Put in it; none of them is half there.
func TestCheckpointGroupCommitFailure(t *testing.T) {
	var fail sync.Mutex
	failing := true
	s := openStore(t, t.TempDir(), checkpoint.Options{Faults: checkpoint.FaultFuncs{
		CommitFunc: func(op checkpoint.Op, id int64, _ string) error {
			fail.Lock()
			defer fail.Unlock()
			if op == checkpoint.OpPut && id == 1 && failing {
				return errInjected
			}
			return nil
		},
	}})
	p, err := s.Begin(1, checkpoint.Meta{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { assert.ErrorIs(t, p.Put("op/a/"+strconv.Itoa(i), make([]byte, 10_000)), errInjected) })
	}
	wg.Wait()
	_, incomplete := listIDs(t, s)
	require.Empty(t, incomplete, "nothing of the failed transactions is stored")
	require.ErrorIs(t, p.Complete(context.Background()), errInjected)
	require.NoError(t, p.Abort())
	fail.Lock()
	failing = false
	fail.Unlock()
	writeCheckpoint(t, s, 2)
	require.Equal(t, int64(2), latestID(t, s))
}

func TestCheckpointRetentionAndAbortFaults(t *testing.T) {
	var mu sync.Mutex
	failOp := checkpoint.Op("")
	logs := &logBuffer{}
	s := openStore(t, t.TempDir(), checkpoint.Options{Retain: 1, Logger: logs.Logger(), Faults: checkpoint.FaultFuncs{
		CommitFunc: func(op checkpoint.Op, _ int64, _ string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == failOp {
				return errInjected
			}
			return nil
		},
	}})
	setFail := func(op checkpoint.Op) {
		mu.Lock()
		failOp = op
		mu.Unlock()
	}
	writeCheckpoint(t, s, 1)

	// Failed retention: Complete succeeds (the checkpoint is complete), the
	// failure is logged, and the next retention catches up.
	setFail(checkpoint.OpRetain)
	writeCheckpoint(t, s, 2)
	complete, _ := listIDs(t, s)
	require.Equal(t, []int64{2, 1}, complete)
	require.Contains(t, logs.String(), "checkpoint retention failed")
	require.Contains(t, logs.String(), errInjected.Error())
	require.Equal(t, int64(2), latestID(t, s))

	// Failed abort: the data stays until the next retention.
	setFail(checkpoint.OpAbort)
	p, err := s.Begin(3, checkpoint.Meta{})
	require.NoError(t, err)
	require.NoError(t, p.Put("op/a/0", []byte("three")))
	require.ErrorIs(t, p.Abort(), errInjected)
	_, incomplete := listIDs(t, s)
	require.Equal(t, []int64{3}, incomplete)
	require.Equal(t, int64(2), latestID(t, s))

	setFail("")
	writeCheckpoint(t, s, 4)
	complete, incomplete = listIDs(t, s)
	require.Equal(t, []int64{4}, complete)
	require.Empty(t, incomplete)
}

// corruptions damage checkpoint id through bbolt directly, as a torn write
// or bit rot would; reason is what the warning must say.
var corruptions = []struct {
	name   string
	reason string
	apply  func(t *testing.T, tx *bolt.Tx, id int64)
}{
	{"flipped byte in a part", "checksum", func(t *testing.T, tx *bolt.Tx, id int64) {
		pb := partsBucket(t, tx, id)
		v := slices.Clone(pb.Get([]byte("op/agg/1")))
		v[len(v)/2] ^= 0x40
		require.NoError(t, pb.Put([]byte("op/agg/1"), v))
	}},
	{"truncated part", "checksum", func(t *testing.T, tx *bolt.Tx, id int64) {
		pb := partsBucket(t, tx, id)
		v := pb.Get([]byte("src/in/1"))
		require.NoError(t, pb.Put([]byte("src/in/1"), slices.Clone(v[:len(v)-10])))
	}},
	{"part replaced by a valid one of another size", "the metadata says", func(t *testing.T, tx *bolt.Tx, id int64) {
		pb := partsBucket(t, tx, id)
		require.NoError(t, pb.Put([]byte("op/agg/2"), slices.Clone(pb.Get([]byte("op/agg/0")))))
	}},
	{"missing part", `part "sink/out/0" is missing`, func(t *testing.T, tx *bolt.Tx, id int64) {
		require.NoError(t, partsBucket(t, tx, id).Delete([]byte("sink/out/0")))
	}},
	{"unlisted part", `part "op/zzz" is not listed`, func(t *testing.T, tx *bolt.Tx, id int64) {
		require.NoError(t, partsBucket(t, tx, id).Put([]byte("op/zzz"), []byte{0, 0, 0, 0}))
	}},
	{"flipped byte in the metadata", "record checksum", func(t *testing.T, tx *bolt.Tx, id int64) {
		cb := ckptBucket(t, tx, id)
		v := slices.Clone(cb.Get([]byte("meta")))
		v[20] ^= 1
		require.NoError(t, cb.Put([]byte("meta"), v))
	}},
	{"undecodable metadata", "bad record magic", func(t *testing.T, tx *bolt.Tx, id int64) {
		require.NoError(t, ckptBucket(t, tx, id).Put([]byte("meta"), []byte("garbage that is not a record")))
	}},
	{"missing parts bucket", "no \"parts\" bucket", func(t *testing.T, tx *bolt.Tx, id int64) {
		require.NoError(t, ckptBucket(t, tx, id).DeleteBucket([]byte("parts")))
	}},
}

func ckptBucket(t *testing.T, tx *bolt.Tx, id int64) *bolt.Bucket {
	t.Helper()
	key := make([]byte, 8)
	for i := range 8 {
		key[i] = byte(uint64(id) >> (56 - 8*i))
	}
	cb := tx.Bucket([]byte("checkpoints")).Bucket(key)
	require.NotNil(t, cb, "checkpoint %d", id)
	return cb
}

func partsBucket(t *testing.T, tx *bolt.Tx, id int64) *bolt.Bucket {
	t.Helper()
	pb := ckptBucket(t, tx, id).Bucket([]byte("parts"))
	require.NotNil(t, pb)
	return pb
}

// damage applies fn to the closed store file in dir through bbolt.
func damage(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(fn))
	require.NoError(t, db.Close())
}

// TestCheckpointCorruptionFallback damages the newest checkpoint and checks
// that Latest falls back to the previous one, with a warning naming the
// damaged checkpoint and why.
func TestCheckpointCorruptionFallback(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir, checkpoint.Options{})
			for id := int64(1); id <= 3; id++ {
				writeCheckpoint(t, s, id)
			}
			require.NoError(t, s.Close(context.Background()))
			damage(t, s.Path(), func(tx *bolt.Tx) error { c.apply(t, tx, 3); return nil })

			logs := &logBuffer{}
			s = openStore(t, dir, checkpoint.Options{Logger: logs.Logger()})
			require.Equal(t, int64(2), latestID(t, s))
			out := logs.String()
			require.Contains(t, out, "level=WARN")
			require.Contains(t, out, "checkpoint=3")
			require.Contains(t, out, "fallback=2")
			require.Contains(t, out, strings.Trim(strconv.Quote(c.reason), `"`))
			require.Equal(t, 1, strings.Count(out, "level=WARN"), out)

			// Read by id, checkpoint 3 fails without fallback.
			_, err := s.Checkpoint(context.Background(), 3)
			require.ErrorIs(t, err, checkpoint.ErrCorrupt)
			require.ErrorContains(t, err, c.reason)
			// List does not verify: it still shows checkpoint 3 complete.
			complete, _ := listIDs(t, s)
			require.Equal(t, []int64{3, 2, 1}, complete)
		})
	}
}

func TestCheckpointNoValidCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, checkpoint.Options{})
	for id := int64(1); id <= 3; id++ {
		writeCheckpoint(t, s, id)
	}
	require.NoError(t, s.Close(context.Background()))
	damage(t, s.Path(), func(tx *bolt.Tx) error {
		corruptions[0].apply(t, tx, 3)
		corruptions[3].apply(t, tx, 2)
		return nil
	})
	logs := &logBuffer{}
	s = openStore(t, dir, checkpoint.Options{Logger: logs.Logger()})
	require.Equal(t, int64(1), latestID(t, s))
	require.Equal(t, 2, strings.Count(logs.String(), "level=WARN"))
	require.NoError(t, s.Close(context.Background()))

	damage(t, s.Path(), func(tx *bolt.Tx) error { corruptions[6].apply(t, tx, 1); return nil })
	logs = &logBuffer{}
	s = openStore(t, dir, checkpoint.Options{Logger: logs.Logger()})
	_, err := s.Latest(context.Background())
	require.ErrorIs(t, err, checkpoint.ErrNoValidCheckpoint)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.NotErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	require.ErrorContains(t, err, "tried 3 completed checkpoint(s) [3 2 1]")
	require.ErrorContains(t, err, "checkpoint 3: ")
	require.ErrorContains(t, err, "checkpoint 1: metadata")
	require.Contains(t, logs.String(), "no older checkpoint to fall back to")
}

// TestCheckpointFileByteFlip flips one byte of a part in the file itself
// (not through bbolt), as a torn sector would.
func TestCheckpointFileByteFlip(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, checkpoint.Options{})
	writeCheckpoint(t, s, 1)
	writeCheckpoint(t, s, 2)
	require.NoError(t, s.Close(context.Background()))

	f, err := os.OpenFile(s.Path(), os.O_RDWR, 0)
	require.NoError(t, err)
	data, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	// The part's bytes may also lie in a page bbolt freed: when the
	// checkpoint's parts were committed in more than one transaction, a
	// later one rewrote the leaf elsewhere. Flip the byte in every copy, so
	// that the live one is damaged whichever it is.
	marker := []byte("<ckpt 2 op/agg/2>")
	require.NotZero(t, bytes.Count(data, marker))
	for i := 0; ; {
		j := bytes.Index(data[i:], marker)
		if j < 0 {
			break
		}
		off := int64(i+j) + int64(len(marker)) + 100
		_, err = f.WriteAt([]byte{data[off] ^ 0xff}, off)
		require.NoError(t, err)
		i += j + len(marker)
	}
	require.NoError(t, f.Close())

	logs := &logBuffer{}
	s = openStore(t, dir, checkpoint.Options{Logger: logs.Logger()})
	require.Equal(t, int64(1), latestID(t, s))
	require.Contains(t, logs.String(), "checkpoint=2")
	require.Contains(t, logs.String(), `part \"op/agg/2\": checksum`)
}

func TestCheckpointStoreLocked(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, checkpoint.Options{})
	_, err := checkpoint.Open(dir, checkpoint.Options{LockTimeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, checkpoint.ErrStateDirLocked)
	require.ErrorContains(t, err, "state dir "+dir+" is in use by another eddy (pid "+strconv.Itoa(os.Getpid())+" on ")
	require.NoError(t, s.Close(context.Background()))
	openStore(t, dir, checkpoint.Options{LockTimeout: 100 * time.Millisecond})
}

func TestCheckpointStoreClosed(t *testing.T) {
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	writeCheckpoint(t, s, 1)
	cp, err := s.Latest(context.Background())
	require.NoError(t, err)
	p, err := s.Begin(2, checkpoint.Meta{})
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))

	_, err = s.Begin(3, checkpoint.Meta{})
	require.ErrorIs(t, err, checkpoint.ErrClosed)
	require.ErrorIs(t, p.Put("a", nil), checkpoint.ErrClosed)
	_, err = s.List()
	require.ErrorIs(t, err, checkpoint.ErrClosed)
	_, err = s.Latest(context.Background())
	require.ErrorIs(t, err, checkpoint.ErrClosed)
	_, err = cp.Get(testParts[0])
	require.ErrorIs(t, err, checkpoint.ErrClosed)
	for part := range cp.Prefix("") {
		t.Fatalf("unexpected part %q", part)
	}
	require.ErrorIs(t, cp.Err(), checkpoint.ErrClosed, "what stopped Prefix")
	require.ErrorIs(t, s.ExportSavepoint(1, filepath.Join(t.TempDir(), "sp")), checkpoint.ErrClosed)
}

// TestCheckpointNewerFormat: a store whose format record has a newer
// version (with a valid checksum) is refused, not misread.
func TestCheckpointNewerFormat(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, checkpoint.Options{})
	writeCheckpoint(t, s, 1)
	require.NoError(t, s.Close(context.Background()))
	damage(t, s.Path(), func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("eddy"))
		rec := slices.Clone(b.Get([]byte("format")))
		require.Equal(t, []byte("edcp\x01f"), rec[:6])
		rec[4] = 4
		n := len(rec) - 4
		binary.BigEndian.PutUint32(rec[n:], crc32.Checksum(rec[:n], crc32.MakeTable(crc32.Castagnoli)))
		return b.Put([]byte("format"), rec)
	})
	_, err := checkpoint.Open(dir, checkpoint.Options{})
	require.ErrorIs(t, err, checkpoint.ErrFormat)
	require.ErrorContains(t, err, "version 4 (this build reads 3)")
}

func TestCheckpointLatestCanceled(t *testing.T) {
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	writeCheckpoint(t, s, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Latest(ctx)
	require.ErrorIs(t, err, context.Canceled)
	p, err := s.Begin(2, checkpoint.Meta{})
	require.NoError(t, err)
	require.ErrorIs(t, p.Complete(ctx), context.Canceled)
	require.NoError(t, p.Abort())
	require.Equal(t, int64(1), latestID(t, s))
}

func TestSavepoint(t *testing.T) {
	s := openStore(t, t.TempDir(), checkpoint.Options{})
	for id := int64(1); id <= 3; id++ {
		writeCheckpoint(t, s, id)
	}
	out := t.TempDir()
	path := filepath.Join(out, "savepoint-2.eddy")
	require.NoError(t, s.ExportSavepoint(2, path))
	_, err := os.Stat(path + ".tmp")
	require.ErrorIs(t, err, fs.ErrNotExist)

	sp, err := checkpoint.OpenSavepoint(path)
	require.NoError(t, err)
	requireCheckpoint(t, sp, 2)
	require.NoError(t, sp.Close())
	_, err = sp.Get(testParts[0])
	require.ErrorIs(t, err, checkpoint.ErrClosed)

	// The savepoint is independent of the store.
	require.NoError(t, s.Close(context.Background()))
	sp, err = checkpoint.OpenSavepoint(path)
	require.NoError(t, err)
	requireCheckpoint(t, sp, 2)
	// Read-only opens may share the file.
	sp2, err := checkpoint.OpenSavepoint(path)
	require.NoError(t, err)
	require.NoError(t, sp2.Close())
	require.NoError(t, sp.Close())

	_, err = checkpoint.OpenSavepoint(filepath.Join(out, "nope"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = checkpoint.OpenSavepoint(s.Path())
	require.ErrorIs(t, err, checkpoint.ErrFormat, "a store is not a savepoint")

	// A damaged savepoint does not open.
	damage(t, path, func(tx *bolt.Tx) error { corruptions[0].apply(t, tx, 2); return nil })
	_, err = checkpoint.OpenSavepoint(path)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.ErrorContains(t, err, "open savepoint "+path)
}

func TestSavepointExportErrors(t *testing.T) {
	var mu sync.Mutex
	var failFile, failCommit checkpoint.Op
	dir := t.TempDir()
	s := openStore(t, dir, checkpoint.Options{Faults: checkpoint.FaultFuncs{
		FileFunc: func(op checkpoint.Op, _ string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == failFile {
				return errInjected
			}
			return nil
		},
		CommitFunc: func(op checkpoint.Op, _ int64, _ string) error {
			mu.Lock()
			defer mu.Unlock()
			if op == failCommit {
				return errInjected
			}
			return nil
		},
	}})
	writeCheckpoint(t, s, 1)
	writeCheckpoint(t, s, 2)
	out := t.TempDir()
	path := filepath.Join(out, "sp")

	require.ErrorIs(t, s.ExportSavepoint(9, path), checkpoint.ErrNoCheckpoint)
	p, err := s.Begin(3, checkpoint.Meta{})
	require.NoError(t, err)
	require.NoError(t, p.Put("a", []byte("x")))
	require.ErrorIs(t, s.ExportSavepoint(3, path), checkpoint.ErrNoCheckpoint, "incomplete")
	require.NoError(t, p.Abort())

	for _, tc := range []struct{ file, commit checkpoint.Op }{
		{file: checkpoint.OpSavepointCreate},
		{commit: checkpoint.OpExport},
		{file: checkpoint.OpSavepointSync},
		{file: checkpoint.OpSavepointRename},
	} {
		mu.Lock()
		failFile, failCommit = tc.file, tc.commit
		mu.Unlock()
		err := s.ExportSavepoint(2, path)
		require.ErrorIs(t, err, errInjected, "%+v", tc)
		entries, err := os.ReadDir(out)
		require.NoError(t, err)
		require.Empty(t, entries, "%+v: neither the savepoint nor its .tmp remain", tc)
	}
	// A failed fsync of the directory comes after the rename: the file is
	// complete, only its durability is in doubt, and the error says so.
	mu.Lock()
	failFile, failCommit = checkpoint.OpSavepointSyncDir, ""
	mu.Unlock()
	require.ErrorIs(t, s.ExportSavepoint(2, path), errInjected)
	require.NoError(t, os.Remove(path))

	mu.Lock()
	failFile = ""
	mu.Unlock()
	require.NoError(t, s.ExportSavepoint(2, path))
	require.ErrorIs(t, s.ExportSavepoint(1, path), fs.ErrExist, "no overwrite")
	sp, err := checkpoint.OpenSavepoint(path)
	require.NoError(t, err)
	requireCheckpoint(t, sp, 2)
	require.NoError(t, sp.Close())

	// A corrupt checkpoint is not exported.
	require.NoError(t, s.Close(context.Background()))
	damage(t, s.Path(), func(tx *bolt.Tx) error { corruptions[0].apply(t, tx, 1); return nil })
	s = openStore(t, dir, checkpoint.Options{})
	err = s.ExportSavepoint(1, filepath.Join(out, "sp1"))
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	_, err = os.Stat(filepath.Join(out, "sp1"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}
