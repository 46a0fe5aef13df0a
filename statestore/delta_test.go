package statestore_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// A chain of a full part and deltas merges into the bytes of a full
// snapshot of the last checkpoint's state; each delta holds only what
// changed, so it is smaller than the full part.
func TestIncrementalChainMergesToFullSnapshot(t *testing.T) {
	parts, want := statestore.ChainParts(t, 4)
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

// incrementalBolt opens a bbolt backend with incremental snapshots.
func incrementalBolt(t testing.TB, o *opener, cacheEntries int) *statestore.Bolt {
	b, err := statestore.NewBolt(statestore.BoltOptions{
		Options: statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now},
		Dir:     t.TempDir(), CacheEntries: cacheEntries, Incremental: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestIncrementalSnapshotsRandomized drives an incremental bbolt backend
// with random operations and checkpoints: snapshots written later with
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
	for _, cache := range []int{0, 32} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("cache%d/seed%d", cache, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 7))
				o := &opener{t: t, maxPar: 16, clock: &fakeClock{now: 1_000_000}}
				b := incrementalBolt(t, o, cache)
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
	o := &opener{t: t, maxPar: 16, clock: &fakeClock{now: 1_000_000}}
	b := incrementalBolt(t, o, 0)
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
	checkpoint := func(id int64) statestore.DeltaSnapshot {
		s, err := b.SnapshotCheckpoint(id)
		require.NoError(t, err)
		var buf bytes.Buffer
		_, err = s.WriteAndRelease(&buf)
		require.NoError(t, err)
		parts = append(parts, buf.Bytes())
		b.CheckpointCompleted(id)
		return s.(statestore.DeltaSnapshot)
	}
	checkpoint(1)
	for i, k := range ks {
		if i%2 == 0 {
			tm.DeleteEventTimer(k, "", 10)
		} else {
			tm.RegisterEventTimer(k, "", 20)
		}
	}
	require.Equal(t, int64(1), checkpoint(2).Base())
	merged, err := statestore.MergeChain(parts)
	require.NoError(t, err)
	require.Equal(t, writeSnapshot(t, b), merged)
}
