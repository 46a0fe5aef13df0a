package statestore_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// A chain of a full part and deltas merges into the bytes of a full
// snapshot of the last checkpoint's state; each delta holds only what
// changed, so it is smaller than the full part.
func TestIncrementalChainMergesToFullSnapshot(t *testing.T) {
	parts, want := statestoretest.ChainParts(t, 4)
	for i, p := range parts[1:] {
		require.Less(t, len(p), len(parts[0])/2, "delta part %d", i+2)
	}
	got, err := statestore.MergeChain(parts)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// A delta part is not a snapshot on its own.
	m, err := statestore.NewMemory(statestore.Options{KeyGroup: func(k string) int { return int(k[len(k)-1]) % 8 }, KeyGroups: [2]int{0, 8}})
	require.NoError(t, err)
	defer m.Close()
	var blobs [][]byte
	require.NoError(t, statestore.SplitBlobs(parts[1], func(_ int, b []byte) error { blobs = append(blobs, b); return nil }))
	require.ErrorIs(t, m.Restore(blobs...), statestore.ErrCorrupt)

	// Parts out of order, or a full part where a delta belongs, fail.
	_, err = statestore.MergeChain([][]byte{parts[1], parts[0]})
	require.ErrorIs(t, err, statestore.ErrCorrupt)
	_, err = statestore.MergeChain([][]byte{parts[0], parts[0]})
	require.ErrorIs(t, err, statestore.ErrCorrupt)

	// A flipped bit in a delta is caught by its blob's checksum.
	bad := bytes.Clone(parts[2])
	bad[len(bad)/2] ^= 1
	_, err = statestore.MergeChain([][]byte{parts[0], parts[1], bad})
	require.ErrorIs(t, err, statestore.ErrCorrupt)
}

// incrementalMemory opens a memory backend with incremental snapshots.
func incrementalMemory(t testing.TB, o *opener) *statestore.Memory {
	m, err := statestore.NewMemory(statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now, Incremental: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// incrementalBolt opens a bbolt backend with incremental snapshots.
func incrementalBolt(t testing.TB, o *opener, cacheEntries int) *statestore.Bolt {
	b, err := statestore.NewBolt(statestore.BoltOptions{
		Options: statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now, Incremental: true},
		Dir:     t.TempDir(), CacheEntries: cacheEntries,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestIncrementalSnapshotsRandomized drives an incremental backend (bbolt
// with and without cache evictions, memory) with random operations and checkpoints: snapshots written later with
// writes between their blobs, some released unwritten (aborted), some
// written but never completed, some turned full before writing (the
// fallback when a base is gone), completed out of order, and cleanups of
// expired entries between them. A memory backend
// given the same operations writes the full snapshot each checkpoint must
// equal: every completed checkpoint's chain, merged, must restore to the
// same state (with TTLs, a chain keeps entries that expired unchanged
// since the base, which a restore drops; so the two are compared after
// a restore).
func TestIncrementalSnapshotsRandomized(t *testing.T) {
	for _, backend := range []string{"bbolt-cache0", "bbolt-cache32", "memory"} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", backend, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 7))
				o := &opener{t: t, maxPar: 16, clock: &fakeClock{now: 1_000_000}}
				var b statestore.IncrementalBackend
				switch backend {
				case "bbolt-cache0":
					b = incrementalBolt(t, o, 0)
				case "bbolt-cache32":
					b = incrementalBolt(t, o, 32)
				default:
					b = incrementalMemory(t, o)
				}
				mir, err := statestore.NewMemory(statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now})
				require.NoError(t, err)
				defer mir.Close()
				step := randomStep(t, r, o, registerAll(t, b), registerAll(t, mir))

				type pending struct {
					id   int64
					s    statestore.DeltaSnapshot
					want []byte
				}
				var (
					pend          []pending
					parts         = map[int64][]byte{}
					bases         = map[int64]int64{}
					id, completed int64
					deltas, fulls int
				)
				for range 3000 {
					switch n := r.IntN(100); {
					case n < 4 && len(pend) < 3:
						id++
						s, err := b.SnapshotCheckpoint(id)
						require.NoError(t, err)
						ds := s.(statestore.DeltaSnapshot)
						if base := ds.Base(); base != 0 {
							require.Contains(t, parts, base, "checkpoint %d is a delta on one not written", id)
							require.LessOrEqual(t, base, completed, "checkpoint %d is a delta on one not completed", id)
						}
						if r.IntN(10) == 0 {
							ds.Full()
							require.Zero(t, ds.Base())
						}
						pend = append(pend, pending{id, ds, writeSnapshot(t, mir)})
					case n < 8 && len(pend) > 0:
						i := r.IntN(len(pend))
						p := pend[i]
						pend = append(pend[:i], pend[i+1:]...)
						if r.IntN(5) == 0 {
							p.s.Release() // aborted before it was written
							continue
						}
						base := p.s.Base()
						w := &blobHook{fn: func(int) {
							for range r.IntN(20) {
								step()
							}
						}}
						_, err := p.s.WriteAndRelease(w)
						require.NoError(t, err)
						if r.IntN(6) == 0 {
							continue // written, but the checkpoint failed elsewhere
						}
						parts[p.id], bases[p.id] = w.Bytes(), base
						var chain [][]byte
						for c := p.id; c != 0; c = bases[c] {
							chain = append([][]byte{parts[c]}, chain...)
						}
						if base == 0 {
							fulls++
						} else {
							deltas++
						}
						merged, err := statestore.MergeChain(chain)
						require.NoError(t, err)
						requireSameRestore(t, o, p.want, merged, "checkpoint %d, a chain of %d", p.id, len(chain))
						if p.id > completed { // the task ignores an older one's notification
							b.CheckpointCompleted(p.id)
							completed = p.id
						}
					case n < 10:
						// Cleanup deletes expired records of the file too.
						_, err := b.Cleanup()
						require.NoError(t, err)
						_, err = mir.Cleanup()
						require.NoError(t, err)
					default:
						step()
					}
				}
				for _, p := range pend {
					p.s.Release()
				}
				require.Greater(t, deltas, 20)
				require.Greater(t, fulls, 2)
				require.NoError(t, b.Err())
			})
		}
	}
}

// requireSameRestore restores two snapshot streams into new memory backends
// and requires that these snapshot the same bytes.
func requireSameRestore(t *testing.T, o *opener, want, got []byte, msg string, args ...any) {
	t.Helper()
	restored := func(stream []byte) []byte {
		m, err := statestore.NewMemory(statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now})
		require.NoError(t, err)
		defer m.Close()
		registerAll(t, m)
		var blobs [][]byte
		require.NoError(t, statestore.SplitBlobs(stream, func(_ int, b []byte) error { blobs = append(blobs, b); return nil }))
		require.NoError(t, m.Restore(blobs...), msg, args)
		return writeSnapshot(t, m)
	}
	require.Equal(t, restored(want), restored(got), append([]any{msg}, args...)...)
}

// A key group whose timers all went, its state unchanged, has no blob in
// the delta: the merged chain has none of its timers, and a group that
// only gained timers gets them.
func TestIncrementalTimersOfUnchangedGroups(t *testing.T) {
	forEachIncremental(t, func(t *testing.T, _ *opener, b statestore.IncrementalBackend) {
		val, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "val"})
		require.NoError(t, err)
		tm := b.TimerService("timers")
		ks := keys(64)
		for i, k := range ks {
			val.Put(k, "", int64(i))
			if i%2 == 0 {
				tm.RegisterEventTimer(k, "", 10)
			}
		}
		var parts [][]byte
		checkpoint := func(id int64) int64 {
			part, base := completeCheckpoint(t, b, id)
			parts = append(parts, part)
			return base
		}
		checkpoint(1)
		for i, k := range ks {
			if i%2 == 0 {
				tm.DeleteEventTimer(k, "", 10)
			} else {
				tm.RegisterEventTimer(k, "", 20)
			}
		}
		require.Equal(t, int64(1), checkpoint(2))
		merged, err := statestore.MergeChain(parts)
		require.NoError(t, err)
		require.Equal(t, writeSnapshot(t, b), merged)
	})
}

// completeCheckpoint takes checkpoint id's snapshot of b, writes it and
// completes the checkpoint; it returns the part and the snapshot's base.
func completeCheckpoint(t testing.TB, b statestore.IncrementalBackend, id int64) (part []byte, base int64) {
	t.Helper()
	s, err := b.SnapshotCheckpoint(id)
	require.NoError(t, err)
	base = s.(statestore.DeltaSnapshot).Base()
	var buf bytes.Buffer
	_, err = s.WriteAndRelease(&buf)
	require.NoError(t, err)
	b.CheckpointCompleted(id)
	return buf.Bytes(), base
}

// forEachIncremental runs fn as a subtest on an incremental bbolt backend
// and on an incremental memory backend.
func forEachIncremental(t *testing.T, fn func(t *testing.T, o *opener, b statestore.IncrementalBackend)) {
	for _, name := range []string{"bbolt", "memory"} {
		t.Run(name, func(t *testing.T) {
			o := &opener{t: t, maxPar: 16, clock: &fakeClock{now: 1_000_000}}
			if name == "bbolt" {
				fn(t, o, incrementalBolt(t, o, 0))
			} else {
				fn(t, o, incrementalMemory(t, o))
			}
		})
	}
}

// incrementalFixture is an incremental backend with one value state of 200
// keys, whose checkpoints the test takes and completes.
type incrementalFixture struct {
	t     *testing.T
	b     statestore.IncrementalBackend
	val   statestore.ValueState[int64]
	parts map[int64][]byte
	bases map[int64]int64
}

func newIncrementalFixture(t *testing.T, b statestore.IncrementalBackend) *incrementalFixture {
	f := &incrementalFixture{t: t, b: b, parts: map[int64][]byte{}, bases: map[int64]int64{}}
	var err error
	f.val, err = statestore.RegisterValue(f.b, statestore.ValueDescriptor[int64]{Name: "val"})
	require.NoError(t, err)
	for i, k := range keys(200) {
		f.val.Put(k, "", int64(i))
	}
	return f
}

// checkpoint takes checkpoint id's snapshot, writes it and, with complete,
// completes it and requires that its chain merges into a full snapshot of
// the state. It returns the snapshot's base.
func (f *incrementalFixture) checkpoint(id int64, complete bool) int64 {
	f.t.Helper()
	s, err := f.b.SnapshotCheckpoint(id)
	require.NoError(f.t, err)
	want := writeSnapshot(f.t, f.b)
	base := s.(statestore.DeltaSnapshot).Base()
	var buf bytes.Buffer
	_, err = s.WriteAndRelease(&buf)
	require.NoError(f.t, err)
	if !complete {
		return base
	}
	f.parts[id], f.bases[id] = buf.Bytes(), base
	var chain [][]byte
	for c := id; c != 0; c = f.bases[c] {
		chain = append([][]byte{f.parts[c]}, chain...)
	}
	merged, err := statestore.MergeChain(chain)
	require.NoError(f.t, err)
	require.Equal(f.t, want, merged, "checkpoint %d", id)
	f.b.CheckpointCompleted(id)
	return base
}

// A chain holds at most 16 deltas: the next snapshot is full.
func TestIncrementalChainLength(t *testing.T) {
	forEachIncremental(t, func(t *testing.T, _ *opener, b statestore.IncrementalBackend) {
		f := newIncrementalFixture(t, b)
		require.Zero(t, f.checkpoint(1, true))
		for id := int64(2); id <= 17; id++ {
			f.val.Put("k7", "", id)
			require.Equal(t, id-1, f.checkpoint(id, true), "checkpoint %d", id)
		}
		f.val.Put("k7", "", 18)
		require.Zero(t, f.checkpoint(18, true), "the 17th delta")
		f.val.Put("k7", "", 19)
		require.Equal(t, int64(18), f.checkpoint(19, true))
	})
}

// A delta holds the deletions since its base as tombstones, also in a key
// group where nothing else changed, and a state registered since the base
// makes the next snapshot full.
func TestIncrementalDeletionsAndNewStates(t *testing.T) {
	forEachIncremental(t, func(t *testing.T, _ *opener, b statestore.IncrementalBackend) {
		f := newIncrementalFixture(t, b)
		require.Zero(t, f.checkpoint(1, true))
		f.val.Clear("k7", "")
		require.Equal(t, int64(1), f.checkpoint(2, true), "one deletion")
		require.Less(t, len(f.parts[2]), len(f.parts[1])/20, "the delta holds one group's blob")
		f.val.Put("k7", "", 7)
		f.val.Clear("k7", "")
		f.val.Clear("k8", "")
		f.val.Put("k8", "", 80)
		require.Equal(t, int64(2), f.checkpoint(3, true), "deleted and written again")

		other, err := statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "other"})
		require.NoError(t, err)
		other.Put("k1", "", "x")
		require.Zero(t, f.checkpoint(4, true), "a state registered since the base")
		other.Clear("k1", "")
		require.Equal(t, int64(4), f.checkpoint(5, true))
	})
}

// A chain of either backend, merged, restores into the other backend: the
// state the other then snapshots is the one the chain was taken from.
func TestIncrementalChainRestoresIntoTheOtherBackend(t *testing.T) {
	forEachIncremental(t, func(t *testing.T, o *opener, b statestore.IncrementalBackend) {
		f := newIncrementalFixture(t, b)
		require.Zero(t, f.checkpoint(1, true))
		f.val.Put("k3", "", -3)
		f.val.Clear("k4", "")
		require.Equal(t, int64(1), f.checkpoint(2, true))
		want := writeSnapshot(t, b)
		merged, err := statestore.MergeChain([][]byte{f.parts[1], f.parts[2]})
		require.NoError(t, err)

		opts := statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now}
		var other statestore.Backend
		if _, ok := b.(*statestore.Memory); ok {
			other = openBolt(t, opts, 0)
		} else {
			other, err = statestore.NewMemory(opts)
			require.NoError(t, err)
			defer other.Close()
		}
		var blobs [][]byte
		require.NoError(t, statestore.SplitBlobs(merged, func(_ int, blob []byte) error { blobs = append(blobs, blob); return nil }))
		require.NoError(t, other.Restore(blobs...))
		_, err = statestore.RegisterValue(other, statestore.ValueDescriptor[int64]{Name: "val"})
		require.NoError(t, err)
		require.Equal(t, want, writeSnapshot(t, other))
	})
}

// Deltas build on the last completed checkpoint, however many fail after
// it; the 65th checkpoint since the last completion is full (the backend
// keeps at most 64 change sets), and deltas build on it once it completes.
func TestIncrementalWithoutCompletions(t *testing.T) {
	forEachIncremental(t, func(t *testing.T, _ *opener, b statestore.IncrementalBackend) {
		f := newIncrementalFixture(t, b)
		require.Zero(t, f.checkpoint(1, true))
		id := int64(2)
		for ; id <= 64; id++ {
			f.val.Put(keys(200)[id], "", -id)
			f.val.Clear(keys(200)[id+100], "")
			require.Equal(t, int64(1), f.checkpoint(id, false), "checkpoint %d", id)
		}
		// A delta on 1 holds the changes of all the failed ones.
		f.val.Put("k0", "", -1)
		require.Equal(t, int64(1), f.checkpoint(id, true))
		for id++; id < 130; id++ {
			require.Equal(t, int64(65), f.checkpoint(id, false), "checkpoint %d", id)
		}
		require.Zero(t, f.checkpoint(id, true), "checkpoint %d, the 65th since the last completion", id)
		f.val.Put("k1", "", -2)
		require.Equal(t, id, f.checkpoint(id+1, true))
	})
}

// A table that records more changes than maxTableChanges (the bbolt
// backend: changed records between two checkpoints; the memory backend:
// deletions since the base) stops recording: the next snapshot is full,
// and the ones after it deltas again.
func TestIncrementalTooManyChanges(t *testing.T) {
	statestore.SetMaxTableChanges(t, 50)
	forEachIncremental(t, func(t *testing.T, _ *opener, b statestore.IncrementalBackend) {
		f := newIncrementalFixture(t, b)
		require.Zero(t, f.checkpoint(1, true))
		ks := keys(200)
		for _, k := range ks[:40] {
			f.val.Clear(k, "")
		}
		require.Equal(t, int64(1), f.checkpoint(2, true), "40 deletions")
		for _, k := range ks[40:100] {
			f.val.Clear(k, "")
		}
		require.Zero(t, f.checkpoint(3, true), "60 deletions")
		f.val.Clear("k105", "")
		require.Equal(t, int64(3), f.checkpoint(4, true))
	})
}
