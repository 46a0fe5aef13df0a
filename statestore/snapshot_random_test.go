package statestore_test

import (
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// TestSnapshotsRandomized drives a backend with random writes, deletes,
// timers, clock steps and snapshots: up to three snapshots live at once,
// each written later with WriteTo or WriteAndRelease while more writes
// happen between its blobs (as the task writes while the coordinator
// encodes), or released unwritten. A memory backend that gets the same
// operations, and writes a snapshot at once whenever the backend under test
// takes one, says what each snapshot must contain: copy-on-write, writes in
// place to groups already written, and timer chunks shared until written
// must never let a later write into an earlier snapshot, and the timers a
// snapshot reuses from an earlier one's encoding (the mirror has no such
// cache) must be those it holds.
func TestSnapshotsRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run("seed"+strconv.FormatUint(seed, 10), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, o *opener) {
				r := rand.New(rand.NewPCG(seed, 99))
				sub := o.all()
				mir, err := statestore.NewMemory(statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now})
				require.NoError(t, err)
				defer mir.Close()
				statestore.DisableTimerCache(mir) // it encodes every snapshot's timers anew
				fs, fm := registerAll(t, sub), registerAll(t, mir)
				step := randomStep(t, r, o, fs, fm)
				type live struct {
					s    statestore.Snapshot
					want []byte
				}
				var snaps []live
				written := 0
				for range 2000 {
					switch n := r.IntN(100); {
					case n < 4 && len(snaps) < 3:
						s, err := sub.Snapshot()
						require.NoError(t, err)
						snaps = append(snaps, live{s, writeSnapshot(t, mir)})
					case n < 7 && len(snaps) > 0:
						i := r.IntN(len(snaps))
						l := snaps[i]
						snaps = append(snaps[:i], snaps[i+1:]...)
						if r.IntN(4) == 0 {
							l.s.Release()
							continue
						}
						w := &blobHook{fn: func(int) {
							for range r.IntN(30) {
								step()
							}
						}}
						var err error
						if r.IntN(2) == 0 {
							_, err = l.s.WriteAndRelease(w)
						} else {
							_, err = l.s.WriteTo(w)
							l.s.Release()
						}
						require.NoError(t, err)
						require.Equal(t, l.want, w.Bytes(), "snapshot %d written", written)
						written++
					default:
						step()
					}
				}
				for _, l := range snaps {
					l.s.Release()
				}
				require.Greater(t, written, 15)
				require.Equal(t, writeSnapshot(t, mir), writeSnapshot(t, sub), "the state at the end")
				require.NoError(t, sub.Err())

				// The end state restores into one and into three subtasks
				// (registered before or after the restore): they hold the
				// same values and timers and snapshot the same blobs.
				blobs := snapshotBlobs(t, sub)
				want := dumpAll(t, sub, fs)
				require.NotEmpty(t, want)
				for _, p := range []int{1, 3} {
					got, gotBlobs := map[string]string{}, map[int][]byte{}
					for i := range p {
						b := o.subtask(i, p)
						start, end := b.KeyGroupRange()
						var f *fixture
						if i%2 == 0 {
							f = registerAll(t, b)
						}
						require.NoError(t, b.Restore(inRange(blobs, start, end)...))
						if f == nil {
							f = registerAll(t, b)
						}
						maps.Copy(gotBlobs, snapshotBlobs(t, b))
						maps.Copy(got, dumpAll(t, b, f))
						require.NoError(t, b.Err())
					}
					require.Equal(t, blobs, gotBlobs, "%d subtasks' blobs", p)
					require.Equal(t, want, got, "%d subtasks' state", p)
				}
			})
		})
	}
}

// randomStep returns a function that applies one random operation to the
// states of fs and fm alike (writes, clears, deletes, namespace merges,
// reads that restart a TTL, timer deletes, watermark and processing-time
// advances, clock steps past TTLs) and checks that both fire the same
// timers and read the same values.
func randomStep(t *testing.T, r *rand.Rand, o *opener, fs, fm *fixture) func() {
	ks := keys(120)
	wm := int64(0)
	return func() {
		k := ks[r.IntN(len(ks))]
		ns := "w" + strconv.Itoa(r.IntN(3))
		switch n := r.IntN(24); {
		case n < 10:
			i := r.IntN(1000)
			fs.fill(k, i)
			fm.fill(k, i)
		case n < 12:
			fs.val.Clear(k, ns)
			fm.val.Clear(k, ns)
		case n < 14:
			fs.list.Clear(k, ns)
			fm.list.Clear(k, ns)
			fs.red.Clear(k, "")
			fm.red.Clear(k, "")
		case n < 16:
			ts := int64(1000 + r.IntN(7))
			fs.tm.DeleteEventTimer(k, ns, ts)
			fm.tm.DeleteEventTimer(k, ns, ts)
		case n < 18:
			wm += int64(r.IntN(3))
			var firedS, firedM []statestore.Timer
			require.NoError(t, fs.tm.AdvanceWatermark(1000+wm%8, func(tm statestore.Timer) error { firedS = append(firedS, tm); return nil }))
			require.NoError(t, fm.tm.AdvanceWatermark(1000+wm%8, func(tm statestore.Timer) error { firedM = append(firedM, tm); return nil }))
			require.Equal(t, firedM, firedS, "fired timers")
		case n < 19:
			o.clock.Advance(int64(r.IntN(20)) * 60_000) // TTL 1h: some values expire
		case n < 20:
			// Namespaces merged into one (session windows): the sources go.
			fs.list.MergeNamespaces(k, ns, "w0", "w1", "w2")
			fm.list.MergeNamespaces(k, ns, "w0", "w1", "w2")
			fs.agg.MergeNamespaces(k, ns, "w0", "w1", "w2")
			fm.agg.MergeNamespaces(k, ns, "w0", "w1", "w2")
		case n < 21:
			f := "f" + strconv.Itoa(r.IntN(5))
			fs.mp.Delete(k, "", f)
			fm.mp.Delete(k, "", f)
		case n < 22:
			fs.val.Delete(k, ns)
			fm.val.Delete(k, ns)
		case n < 23:
			// A read restarts the TTL, or deletes an expired value.
			vs, oks := fs.ttl.Get(k, "")
			vm, okm := fm.ttl.Get(k, "")
			require.Equal(t, okm, oks, "ttl value of %q", k)
			require.Equal(t, vm, vs, "ttl value of %q", k)
		default:
			var firedS, firedM []statestore.Timer
			now := o.clock.now / 1000
			require.NoError(t, fs.tm.AdvanceProcessingTime(now, func(tm statestore.Timer) error { firedS = append(firedS, tm); return nil }))
			require.NoError(t, fm.tm.AdvanceProcessingTime(now, func(tm statestore.Timer) error { firedM = append(firedM, tm); return nil }))
			require.Equal(t, firedM, firedS, "fired processing timers")
		}
	}
}
