package statestore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A snapshot reuses the encoded timers of the groups whose timers did not
// change since an earlier snapshot wrote them, and encodes anew those where
// a timer was registered, deleted or fired; its bytes are those of a
// backend without the cache given the same timers.
func TestTimerEncodingsReused(t *testing.T) {
	opts := Options{KeyGroup: func(k string) int { return int(k[0] - 'a') }, KeyGroups: [2]int{0, 4}}
	ops := []struct {
		name string
		do   func(t *testing.T, s *TimerService)
	}{
		{"register", func(_ *testing.T, s *TimerService) { s.RegisterEventTimer("b2", "", 50) }},
		{"delete", func(_ *testing.T, s *TimerService) { s.DeleteEventTimer("b1", "", 21) }},
		{"fire", func(t *testing.T, s *TimerService) {
			var fired []string
			require.NoError(t, s.AdvanceWatermark(20, func(tm Timer) error {
				fired = append(fired, tm.Key)
				return nil
			}))
			require.Equal(t, []string{"b0"}, fired)
		}},
		{"processing", func(_ *testing.T, s *TimerService) { s.DeleteProcessingTimer("b0", "p", 7) }},
	}
	// Event timers at 30 and up, but b0's at 20 and b1's at 21.
	at := map[string]int64{"a0": 30, "a1": 31, "b0": 20, "b1": 21, "c0": 40, "d0": 50}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			var got [2][]byte
			var svc [2]*TimerService
			for i, cached := range []bool{true, false} {
				m, err := NewMemory(opts)
				require.NoError(t, err)
				if !cached {
					DisableTimerCache(m)
				}
				s := m.TimerService("w")
				svc[i] = s
				for k, ts := range at {
					s.RegisterEventTimer(k, "", ts)
					s.RegisterProcessingTimer(k, "p", 7)
				}
				snapshotBytes(t, m)
				snapshotBytes(t, m) // writes what the first cached
				op.do(t, s)
				got[i] = snapshotBytes(t, m)
			}
			require.Equal(t, got[1], got[0], "with the cache and without")
			require.Nil(t, svc[1].cache)
			c := svc[0].cache.groups
			require.Len(t, c, 4)
			for gi, e := range c {
				if gi == 1 { // b: changed, encoded by snapshot 3
					require.Equal(t, uint64(3), e.snap, "group %d", gi)
				} else { // written by snapshot 1, reused by 2 and 3
					require.Equal(t, uint64(1), e.snap, "group %d", gi)
				}
			}
		})
	}
}
