package statestore_test

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

func TestValueTTL(t *testing.T) {
	cases := []struct {
		name     string
		updateOn statestore.TTLUpdate
		// steps at clock offsets (ms); "r" reads, "w" writes; want is the
		// result of the final read at 'at'.
		reads []int64
		write []int64
		at    int64
		want  bool
	}{
		{name: "fresh", write: []int64{0}, at: 999, want: true},
		{name: "expired at ttl", write: []int64{0}, at: 1000, want: false},
		{name: "write restarts", write: []int64{0, 600}, at: 1500, want: true},
		{name: "read does not restart", updateOn: statestore.OnCreateAndWrite, write: []int64{0}, reads: []int64{600}, at: 1200, want: false},
		{name: "read restarts", updateOn: statestore.OnReadAndWrite, write: []int64{0}, reads: []int64{600}, at: 1200, want: true},
		{name: "read after expiry does not revive", updateOn: statestore.OnReadAndWrite, write: []int64{0}, reads: []int64{1000}, at: 1001, want: false},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				b := o.all()
				s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v", TTL: time.Second, UpdateOn: tc.updateOn})
				require.NoError(t, err)
				base := o.clock.now
				type ev struct {
					at    int64
					write bool
				}
				var evs []ev
				for _, w := range tc.write {
					evs = append(evs, ev{w, true})
				}
				for _, r := range tc.reads {
					evs = append(evs, ev{r, false})
				}
				slices.SortStableFunc(evs, func(a, b ev) int { return int(a.at - b.at) })
				for _, e := range evs {
					o.clock.now = base + e.at
					if e.write {
						s.Put("k", "", 1)
					} else {
						s.Get("k", "")
					}
				}
				o.clock.now = base + tc.at
				_, ok := s.Get("k", "")
				require.Equal(t, tc.want, ok)
				require.Equal(t, tc.want, len(slices.Collect(s.Namespaces("k"))) == 1)
				require.Equal(t, tc.want, len(slices.Collect(s.Keys(o.keyGroup("k")))) == 1)
			})
		}
	})
}

func TestTTLAllKinds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		ttl := statestore.ValueDescriptor[int]{Name: "v", TTL: time.Second}
		v, err := statestore.RegisterValue(b, ttl)
		require.NoError(t, err)
		l, err := statestore.RegisterList(b, statestore.ListDescriptor[int]{Name: "l", TTL: time.Second})
		require.NoError(t, err)
		m, err := statestore.RegisterMap(b, statestore.MapDescriptor[string, int]{Name: "m", TTL: time.Second})
		require.NoError(t, err)
		r, err := statestore.RegisterReducing(b, statestore.ReducingDescriptor[int]{Name: "r", TTL: time.Second, Reduce: func(a, b int) int { return a + b }})
		require.NoError(t, err)
		ad := avgDescriptor("a")
		ad.TTL = time.Second
		a, err := statestore.RegisterAggregating(b, ad)
		require.NoError(t, err)
		forever, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "forever"})
		require.NoError(t, err)

		v.Put("k", "", 1)
		l.Add("k", "", 1)
		m.Put("k", "", "old", 1)
		r.Add("k", "", 5)
		a.Add("k", "", 5)
		forever.Put("k", "", 1)
		o.clock.Advance(600)
		l.Add("k", "", 2) // restarts the whole list
		m.Put("k", "", "new", 2)
		o.clock.Advance(600) // 1200 after the first writes, 600 after the second

		_, ok := v.Get("k", "")
		require.False(t, ok)
		require.Equal(t, []int{1, 2}, l.Get("k", ""))
		require.Equal(t, map[string]int{"new": 2}, maps.Collect(m.Iterate("k", "")))
		require.False(t, m.Contains("k", "", "old"))
		require.Equal(t, 1, m.Len("k", ""))
		_, ok = r.Get("k", "")
		require.False(t, ok)
		r.Add("k", "", 7) // after expiry: starts again
		got, _ := r.Get("k", "")
		require.Equal(t, 7, got)
		a.Add("k", "", 1)
		avg, _ := a.Get("k", "")
		require.Equal(t, 1.0, avg)

		// Expired entries are left out of snapshots.
		o.clock.Advance(500) // list and "new" expire now; r and a are 500 old
		restored := o.all()
		blobs := snapshotBlobs(t, b)
		v2, err := statestore.RegisterValue(restored, ttl)
		require.NoError(t, err)
		l2, err := statestore.RegisterList(restored, statestore.ListDescriptor[int]{Name: "l", TTL: time.Second})
		require.NoError(t, err)
		require.NoError(t, restored.Restore(inRange(blobs, 0, o.maxPar)...))
		_, ok = v2.Get("k", "")
		require.False(t, ok)
		require.Nil(t, l2.Get("k", ""))
		st, err := restored.State("m") // restored lazily, decoded on registration
		require.ErrorIs(t, err, statestore.ErrUnknownState)
		require.Nil(t, st)
		m2, err := statestore.RegisterMap(restored, statestore.MapDescriptor[string, int]{Name: "m", TTL: time.Second})
		require.NoError(t, err)
		require.Zero(t, m2.Len("k", ""))
		r2, err := statestore.RegisterReducing(restored, statestore.ReducingDescriptor[int]{Name: "r", TTL: time.Second, Reduce: func(a, b int) int { return a + b }})
		require.NoError(t, err)
		got, ok = r2.Get("k", "")
		require.True(t, ok)
		require.Equal(t, 7, got)
		o.clock.Advance(500) // r's TTL time survived the restore
		_, ok = r2.Get("k", "")
		require.False(t, ok)
	})
}

func TestCleanup(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v", TTL: time.Second})
		require.NoError(t, err)
		m, err := statestore.RegisterMap(b, statestore.MapDescriptor[int, int]{Name: "m", TTL: time.Second})
		require.NoError(t, err)
		forever, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "forever"})
		require.NoError(t, err)
		ks := keys(100)
		for i, k := range ks {
			v.Put(k, "", i)
			m.Put(k, "", 1, i)
			m.Put(k, "", 2, i)
			forever.Put(k, "", i)
		}
		o.clock.Advance(500)
		for _, k := range ks[:10] {
			v.Put(k, "", 0)
			m.Put(k, "", 2, 0)
		}
		n, err := b.Cleanup()
		require.NoError(t, err)
		require.Zero(t, n)
		o.clock.Advance(500)
		_, _ = b.Snapshot() // cleanup must copy what a snapshot shares
		n, err = b.Cleanup()
		require.NoError(t, err)
		require.Equal(t, 90+100+90, n) // 90 values, 100 map entries "1", 90 entries "2"
		live := 0
		for g := 0; g < o.maxPar; g++ {
			for k := range v.Keys(g) {
				live++
				require.Contains(t, ks[:10], k)
			}
		}
		require.Equal(t, 10, live)
		require.Equal(t, 1, m.Len(ks[0], ""))
		require.Zero(t, m.Len(ks[50], ""))
		_, ok := forever.Get(ks[50], "")
		require.True(t, ok)
	})
}

// TestTTLAcrossRestore: a restore applies the registered state's TTL, not
// the snapshot's. An entry written without a TTL starts one at the
// restore; an entry of a state restored without a TTL loses its own; an
// entry that expired between the snapshot and the restore is not
// restored at all. So whether the state is registered before the restore or after it (then
// the bbolt backend rewrites the records it adopts).
func TestTTLAcrossRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		snapshot := func(ttl time.Duration) map[int][]byte {
			b := o.all()
			s, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v", TTL: ttl})
			require.NoError(t, err)
			s.Put("k", "", 1)
			return snapshotBlobs(t, b)
		}
		restore := func(t *testing.T, blobs map[int][]byte, ttl time.Duration, registerFirst bool) (statestore.Backend, statestore.ValueState[int]) {
			r := o.all()
			var s statestore.ValueState[int]
			register := func() {
				var err error
				s, err = statestore.RegisterValue(r, statestore.ValueDescriptor[int]{Name: "v", TTL: ttl})
				require.NoError(t, err)
			}
			if registerFirst {
				register()
			}
			require.NoError(t, r.Restore(inRange(blobs, 0, o.maxPar)...))
			if !registerFirst {
				register()
			}
			return r, s
		}
		present := func(s statestore.ValueState[int]) bool {
			_, ok := s.Get("k", "")
			return ok
		}
		for _, registerFirst := range []bool{true, false} {
			t.Run("register-before-restore="+strconv.FormatBool(registerFirst), func(t *testing.T) {
				t.Run("TTL added", func(t *testing.T) {
					blobs := snapshot(0)
					o.clock.Advance(5000)
					_, s := restore(t, blobs, time.Second, registerFirst)
					o.clock.Advance(999)
					require.True(t, present(s), "the TTL starts at the restore")
					o.clock.Advance(1)
					require.False(t, present(s))
				})
				t.Run("TTL removed", func(t *testing.T) {
					blobs := snapshot(time.Second)
					o.clock.Advance(600)
					_, s := restore(t, blobs, 0, registerFirst)
					o.clock.Advance(10_000)
					require.True(t, present(s))
				})
				t.Run("expired meanwhile", func(t *testing.T) {
					blobs := snapshot(time.Second)
					o.clock.Advance(1000)
					r, s := restore(t, blobs, time.Second, registerFirst)
					n, err := r.Cleanup()
					require.NoError(t, err)
					require.Zero(t, n, "the restore left nothing expired to clean up")
					require.False(t, present(s))
					require.Empty(t, snapshotBlobs(t, r))
				})
			})
		}
	})
}
