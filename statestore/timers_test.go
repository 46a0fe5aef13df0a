package statestore_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

type fired []string

func (f *fired) record(t statestore.Timer) error {
	*f = append(*f, fmt.Sprintf("%s/%s@%d", t.Key, t.Namespace, t.Timestamp))
	return nil
}

func TestEventTimers(t *testing.T) {
	type op func(s *statestore.TimerService, f *fired) error
	reg := func(k, ns string, ts int64) op {
		return func(s *statestore.TimerService, _ *fired) error { s.RegisterEventTimer(k, ns, ts); return nil }
	}
	del := func(k, ns string, ts int64) op {
		return func(s *statestore.TimerService, _ *fired) error { s.DeleteEventTimer(k, ns, ts); return nil }
	}
	wm := func(w int64) op {
		return func(s *statestore.TimerService, f *fired) error { return s.AdvanceWatermark(w, f.record) }
	}
	cases := []struct {
		name string
		ops  []op
		want fired
		left int
	}{
		{name: "order by timestamp, ties in registration order",
			ops:  []op{reg("b", "", 20), reg("a", "y", 10), reg("b", "x", 10), reg("a", "x", 10), reg("c", "", 5), wm(100)},
			want: fired{"c/@5", "a/y@10", "b/x@10", "a/x@10", "b/@20"}},
		{name: "only timers up to the watermark",
			ops:  []op{reg("a", "", 10), reg("a", "", 11), reg("a", "", 12), wm(11)},
			want: fired{"a/@10", "a/@11"}, left: 1},
		{name: "dedupe", ops: []op{reg("a", "", 10), reg("a", "", 10), reg("a", "", 10), wm(10)}, want: fired{"a/@10"}},
		{name: "delete", ops: []op{reg("a", "", 10), reg("b", "", 10), reg("c", "", 30), del("a", "", 10), del("c", "", 30), del("zz", "", 1), wm(100)},
			want: fired{"b/@10"}},
		{name: "delete then register again", ops: []op{reg("a", "", 10), del("a", "", 10), reg("a", "", 10), wm(100)}, want: fired{"a/@10"}},
		{name: "watermark never goes back",
			ops:  []op{wm(50), reg("a", "", 40), reg("a", "", 60), wm(10)},
			want: fired{"a/@40"}, left: 1},
		{name: "fires again after re-registration", ops: []op{reg("a", "", 10), wm(10), reg("a", "", 10), wm(10)}, want: fired{"a/@10", "a/@10"}},
	}
	forEachBackend(t, func(t *testing.T, o *opener) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s := o.all().TimerService("op")
				var f fired
				for _, op := range tc.ops {
					require.NoError(t, op(s, &f))
				}
				require.Equal(t, tc.want, f)
				require.Equal(t, tc.left, s.Len(statestore.EventTime))
			})
		}
	})
}

func TestTimersRegisteredWhileFiring(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		s := o.all().TimerService("op")
		s.RegisterEventTimer("a", "", 10)
		s.RegisterEventTimer("b", "", 20)
		s.RegisterEventTimer("c", "", 30)
		var f fired
		err := s.AdvanceWatermark(25, func(tm statestore.Timer) error {
			if tm.Key == "a" {
				s.RegisterEventTimer("a2", "", 15) // <= watermark: fires in this call, in order
				s.RegisterEventTimer("a3", "", 9)  // in the past: fires next
				s.RegisterEventTimer("a4", "", 26) // later: waits
				s.DeleteEventTimer("b", "", 20)    // deleted before it fires
			}
			return f.record(tm)
		})
		require.NoError(t, err)
		require.Equal(t, fired{"a/@10", "a3/@9", "a2/@15"}, f)
		next, ok := s.NextEventTime()
		require.True(t, ok)
		require.Equal(t, int64(26), next)
		require.Equal(t, int64(25), s.Watermark())
	})
}

func TestTimerFireError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		s := o.all().TimerService("op")
		for ts := int64(1); ts <= 3; ts++ {
			s.RegisterEventTimer("k", "", ts)
		}
		boom := errors.New("boom")
		err := s.AdvanceWatermark(10, func(tm statestore.Timer) error {
			if tm.Timestamp == 2 {
				return boom
			}
			return nil
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, 1, s.Len(statestore.EventTime), "the failed timer is gone, the next one stays")
	})
}

func TestProcessingTimers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		s := o.all().TimerService("op")
		_, ok := s.NextProcessingTime()
		require.False(t, ok)
		s.RegisterProcessingTimer("a", "", 300)
		s.RegisterProcessingTimer("b", "", 100)
		s.RegisterProcessingTimer("c", "", 200)
		s.RegisterEventTimer("e", "", 50) // other domain
		s.DeleteProcessingTimer("c", "", 200)
		next, ok := s.NextProcessingTime()
		require.True(t, ok)
		require.Equal(t, int64(100), next)
		var f fired
		require.NoError(t, s.AdvanceProcessingTime(250, f.record))
		require.Equal(t, fired{"b/@100"}, f)
		next, _ = s.NextProcessingTime()
		require.Equal(t, int64(300), next)
		require.NoError(t, s.AdvanceProcessingTime(math.MaxInt64, f.record))
		require.Equal(t, fired{"b/@100", "a/@300"}, f)
		require.Equal(t, 1, s.Len(statestore.EventTime))
		require.Equal(t, 0, s.Len(statestore.ProcessingTime))
	})
}

func TestTimerHeapRandomized(t *testing.T) {
	// Many registrations and deletions: fires exactly the live timers, sorted.
	forEachBackend(t, func(t *testing.T, o *opener) {
		s := o.all().TimerService("op")
		live := map[[2]int64]bool{}
		x := uint64(42)
		rnd := func(n int64) int64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return int64(x % uint64(n)) }
		for range 5000 {
			k, ts := rnd(50), rnd(1000)
			id := [2]int64{k, ts}
			if rnd(3) == 0 {
				s.DeleteEventTimer(fmt.Sprint(k), "", ts)
				delete(live, id)
			} else {
				s.RegisterEventTimer(fmt.Sprint(k), "", ts)
				live[id] = true
			}
		}
		require.Equal(t, len(live), s.Len(statestore.EventTime))
		last := int64(math.MinInt64)
		n := 0
		require.NoError(t, s.AdvanceWatermark(math.MaxInt64, func(tm statestore.Timer) error {
			require.GreaterOrEqual(t, tm.Timestamp, last)
			last = tm.Timestamp
			var k int64
			_, err := fmt.Sscan(tm.Key, &k)
			require.NoError(t, err)
			require.True(t, live[[2]int64{k, tm.Timestamp}])
			n++
			return nil
		}))
		require.Equal(t, len(live), n)
	})
}
