package statestore_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// itemLog is what a changelog compacted by key holds: per key group, the
// last item of each key.
type itemLog map[int]map[string]statestore.BlobItem

// apply appends a snapshot's part to the log as group mode's changelog
// does: a full part replaces everything; a delta part upserts and deletes
// entries and replaces the timers of each key group (none where it has no
// blob).
func (l itemLog) apply(t testing.TB, part []byte, full bool) {
	t.Helper()
	inPart := map[int]bool{}
	err := statestore.SplitBlobs(part, func(group int, blob []byte) error {
		inPart[group] = true
		items := l[group]
		if items == nil {
			items = map[string]statestore.BlobItem{}
			l[group] = items
		}
		seen := map[string]bool{}
		kg, delta, err := statestore.BlobItems(blob, func(it statestore.BlobItem) error {
			k := string(it.Key)
			seen[k] = true
			if it.Value == nil {
				delete(items, k)
			} else {
				items[k] = statestore.BlobItem{Key: it.Key, Value: bytes.Clone(it.Value)}
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, group, kg)
		require.Equal(t, !full, delta, "key group %d: the blob's flag", kg)
		for k, it := range items {
			if !seen[k] && (full || statestore.IsTimerItem(it.Key)) {
				delete(items, k)
			}
		}
		return nil
	})
	require.NoError(t, err)
	for group, items := range l {
		for k, it := range items {
			if !inPart[group] && (full || statestore.IsTimerItem(it.Key)) {
				delete(items, k)
			}
		}
	}
}

// blobs returns the full blobs that the log's items make, in key-group
// order, back to back.
func (l itemLog) blobs(t testing.TB) []byte {
	t.Helper()
	var out []byte
	for _, group := range slices.Sorted(maps.Keys(l)) {
		blob, err := statestore.ItemsBlob(group, slices.Collect(maps.Values(l[group])))
		require.NoError(t, err)
		out = append(out, blob...)
	}
	return out
}

// A full snapshot's blobs come back byte for byte from their items, in
// whatever order the items come.
func TestBlobItemsRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		f := filled(t, b, 300)
		f.val.Put("k1", "", "")
		f.mp.Put("k2", "", "", 0)
		full := writeSnapshot(t, b)
		r := rand.New(rand.NewPCG(1, 2))
		var groups, timers int
		err := statestore.SplitBlobs(full, func(group int, blob []byte) error {
			var items []statestore.BlobItem
			kg, delta, err := statestore.BlobItems(blob, func(it statestore.BlobItem) error {
				items = append(items, it)
				if statestore.IsTimerItem(it.Key) {
					timers++
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, group, kg)
			require.False(t, delta)
			r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
			back, err := statestore.ItemsBlob(kg, items)
			require.NoError(t, err)
			require.Equal(t, blob, back, "key group %d", kg)
			groups++
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, o.maxPar, groups)
		require.Equal(t, 600, timers, "an event and a processing timer per key")

		empty, err := statestore.ItemsBlob(3, nil)
		require.NoError(t, err)
		require.Nil(t, empty, "no items: no blob")
	})
}

// Items that do not make a blob are errors: an entry named twice, a
// deleted entry, a key that is not an item's, a flipped bit in a blob.
func TestItemsBlobRejects(t *testing.T) {
	o := &opener{t: t, open: backends[0].open, maxPar: 1, clock: &fakeClock{now: 1_000_000}}
	b := o.all()
	filled(t, b, 3)
	blob := writeSnapshot(t, b)
	var items []statestore.BlobItem
	_, _, err := statestore.BlobItems(blob, func(it statestore.BlobItem) error { items = append(items, it); return nil })
	require.NoError(t, err)

	_, err = statestore.ItemsBlob(0, append(slices.Clone(items), items[0]))
	require.ErrorIs(t, err, statestore.ErrCorrupt)
	_, err = statestore.ItemsBlob(0, []statestore.BlobItem{{Key: items[0].Key}})
	require.ErrorIs(t, err, statestore.ErrCorrupt)
	_, err = statestore.ItemsBlob(0, []statestore.BlobItem{{Key: []byte("k1"), Value: items[0].Value}})
	require.ErrorIs(t, err, statestore.ErrCorrupt)
	_, err = statestore.ItemsBlob(0, []statestore.BlobItem{{Key: items[0].Key, Value: []byte{0xf6}}})
	require.ErrorIs(t, err, statestore.ErrCorrupt, "an entry with a timer's value")
	require.False(t, statestore.IsTimerItem(items[0].Key))
	require.True(t, statestore.IsTimerItem(items[len(items)-1].Key))
	bad := bytes.Clone(blob)
	bad[len(bad)/2] ^= 1
	_, _, err = statestore.BlobItems(bad, func(statestore.BlobItem) error { return nil })
	require.ErrorIs(t, err, statestore.ErrCorrupt)
	stop := fmt.Errorf("stop")
	_, _, err = statestore.BlobItems(blob, func(statestore.BlobItem) error { return stop })
	require.ErrorIs(t, err, stop)
}

// The items of each checkpoint's snapshot of a backend with
// Options.Changelog (deltas since the first one), applied in turn to a
// log compacted by key, make the blobs of a full snapshot of the state:
// random operations, cleanups, expiring TTLs, timers. Entries that
// expired unchanged since the base stay in the log until a cleanup
// deletes them, as in a chain, so the two are compared after a restore,
// which drops them. The chain is never cut: every snapshot after the
// first is a delta.
func TestBlobItemsDeltasOverBase(t *testing.T) {
	for _, backend := range []string{"bbolt-cache0", "bbolt-cache32", "memory"} {
		t.Run(backend, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			o := &opener{t: t, maxPar: 16, clock: &fakeClock{now: 1_000_000}}
			opts := statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now, Incremental: true, Changelog: true}
			var b statestore.IncrementalBackend
			switch backend {
			case "memory":
				m, err := statestore.NewMemory(opts)
				require.NoError(t, err)
				b = m
			default:
				cache := 0
				if backend == "bbolt-cache32" {
					cache = 32
				}
				bb, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: t.TempDir(), CacheEntries: cache})
				require.NoError(t, err)
				b = bb
			}
			t.Cleanup(func() { _ = b.Close() })
			mir, err := statestore.NewMemory(statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now})
			require.NoError(t, err)
			defer mir.Close()
			step := randomStep(t, r, o, registerAll(t, b), registerAll(t, mir))
			log := itemLog{}
			deltas := 0
			for id := int64(1); id <= 40; id++ {
				for range r.IntN(60) {
					step()
				}
				if r.IntN(5) == 0 {
					_, err := b.Cleanup()
					require.NoError(t, err)
				}
				part, base := completeCheckpoint(t, b, id)
				if id > 1 {
					require.Equal(t, id-1, base, "checkpoint %d is a delta on the one before", id)
					deltas++
				}
				log.apply(t, part, base == 0)

				restored, err := statestore.NewMemory(statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{0, o.maxPar}, Clock: o.clock.Now})
				require.NoError(t, err)
				var blobs [][]byte
				require.NoError(t, statestore.SplitBlobs(log.blobs(t), func(_ int, blob []byte) error { blobs = append(blobs, blob); return nil }))
				require.NoError(t, restored.Restore(blobs...))
				registerAll(t, restored)
				require.Equal(t, writeSnapshot(t, mir), writeSnapshot(t, restored), "checkpoint %d", id)
				require.NoError(t, restored.Close())
			}
			require.Equal(t, 39, deltas)
		})
	}
}
