package statestore_test

import (
	"bytes"
	"math"
	"runtime"
	"strconv"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// WriteAndRelease writes what WriteTo writes, for the state as it was when
// the snapshot was taken (the task has overwritten every value since), and
// releases the snapshot.
func TestWriteAndReleaseWritesTheSnapshot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		f := filled(t, b, 300)
		want := writeSnapshot(t, b)

		s, err := b.Snapshot()
		require.NoError(t, err)
		for i, k := range keys(300) {
			f.fill(k, i+1000)
		}
		var got bytes.Buffer
		n, err := s.WriteAndRelease(&got)
		require.NoError(t, err)
		require.Equal(t, int64(got.Len()), n)
		require.Equal(t, want, got.Bytes())

		// Released: nothing more to write.
		var again bytes.Buffer
		n, err = s.WriteTo(&again)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

type boxed struct{ B []byte }

// blobHook calls fn with each blob's key group as it is written.
type blobHook struct {
	bytes.Buffer
	fn func(group int)
}

func (h *blobHook) Write(p []byte) (int, error) {
	if err := statestore.SplitBlobs(p, func(g int, _ []byte) error { h.fn(g); return nil }); err != nil {
		return 0, err
	}
	return h.Buffer.Write(p)
}

// A value the task replaced after the snapshot is kept alive by the
// snapshot only until its key group is written by WriteAndRelease (by
// WriteTo, until Release).
func TestWriteAndReleaseLetsGoOfWrittenGroups(t *testing.T) {
	for _, andRelease := range []bool{true, false} {
		t.Run("WriteAndRelease="+strconv.FormatBool(andRelease), func(t *testing.T) {
			// Key "g<N>" is in key group N.
			m, err := statestore.NewMemory(statestore.Options{
				KeyGroups: [2]int{0, 4},
				KeyGroup:  func(k string) int { n, _ := strconv.Atoi(k[1:]); return n },
			})
			require.NoError(t, err)
			defer m.Close()
			st, err := statestore.RegisterValue(m, statestore.ValueDescriptor[*boxed]{Name: "v"})
			require.NoError(t, err)
			for g := range 4 {
				st.Put("g"+strconv.Itoa(g), "", &boxed{B: make([]byte, 1<<10)})
			}
			old, _ := st.Get("g1", "")
			gone := weak.Make(old)
			old = nil

			s, err := m.Snapshot()
			require.NoError(t, err)
			st.Put("g1", "", &boxed{B: []byte("new")}) // only the snapshot holds the old one now
			alive := map[int]bool{}
			w := &blobHook{fn: func(g int) {
				runtime.GC()
				alive[g] = gone.Value() != nil
			}}
			if andRelease {
				_, err = s.WriteAndRelease(w)
			} else {
				_, err = s.WriteTo(w)
				s.Release()
			}
			require.NoError(t, err)
			// When group g's blob is written, the snapshot has dropped it
			// and the groups before it.
			require.Equal(t, map[int]bool{0: true, 1: !andRelease, 2: !andRelease, 3: !andRelease}, alive)
			runtime.GC()
			require.Nil(t, gone.Value())
		})
	}
}

// Once the only live snapshot has written a key group, the task's writes to
// it stop copying; groups not written yet are still copied, and a later
// snapshot freezes everything again.
func TestWriteAndReleaseWritesWrittenGroupsInPlace(t *testing.T) {
	m, err := statestore.NewMemory(statestore.Options{
		KeyGroups: [2]int{0, 4},
		KeyGroup:  func(k string) int { n, _ := strconv.Atoi(k[1:]); return n },
	})
	require.NoError(t, err)
	defer m.Close()
	copies := 0
	st, err := statestore.RegisterValue(m, statestore.ValueDescriptor[*boxed]{Name: "v",
		Copy: func(b *boxed) *boxed { copies++; return &boxed{B: bytes.Clone(b.B)} }})
	require.NoError(t, err)
	for g := range 4 {
		st.Put("g"+strconv.Itoa(g), "", &boxed{B: []byte{byte(g)}})
	}
	want := writeSnapshot(t, m)

	s, err := m.Snapshot()
	require.NoError(t, err)
	w := &blobHook{fn: func(g int) {
		if g != 0 {
			return
		}
		st.Put("g0", "", &boxed{B: []byte("new")})
		require.Zero(t, copies, "a write to a written group copied")
		st.Put("g2", "", &boxed{B: []byte("new")})
		require.Equal(t, 1, copies, "a write to a group not written yet did not copy")
	}}
	_, err = s.WriteAndRelease(w)
	require.NoError(t, err)
	require.Equal(t, want, w.Bytes())

	s, err = m.Snapshot()
	require.NoError(t, err)
	st.Put("g0", "", &boxed{B: []byte("newer")})
	require.Equal(t, 2, copies, "a write after a new snapshot did not copy")
	s.Release()
}

// The task writes every key while WriteAndRelease runs on another goroutine
// (as the coordinator's writer does): the snapshot comes out as it was
// taken. Under -race this also checks that a group written in place is
// handed over to the task without a data race.
func TestWriteAndReleaseWhileTheTaskWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		f := filled(t, b, 2000)
		ks := keys(2000)
		want := writeSnapshot(t, b)

		s, err := b.Snapshot()
		require.NoError(t, err)
		var got bytes.Buffer
		done := make(chan error, 1)
		go func() {
			_, err := s.WriteAndRelease(&got)
			done <- err
		}()
		for round := 1; ; round++ {
			select {
			case err := <-done:
				require.NoError(t, err)
				require.Equal(t, want, got.Bytes())
				return
			default:
			}
			for i, k := range ks {
				f.fill(k, i+round*10_000)
			}
			require.NoError(t, f.tm.AdvanceWatermark(int64(1000+round%7), func(statestore.Timer) error { return nil }))
		}
	})
}

// A snapshot's timers are those registered when it was taken, whatever the
// task does to its timers afterwards: firing, deleting and registering
// timers (which reuses freed records), down to none (which drops the
// records) and up again, over several chunks of records.
func TestSnapshotTimersCopiedOnWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, o *opener) {
		b := o.all()
		tm := b.TimerService("w")
		ks := keys(3000)
		for i, k := range ks {
			tm.RegisterEventTimer(k, "", int64(i))
			tm.RegisterProcessingTimer(k, "ns", int64(i%50))
		}
		want := writeSnapshot(t, b)

		s, err := b.Snapshot()
		require.NoError(t, err)
		fired := 0
		fire := func(statestore.Timer) error { fired++; return nil }
		require.NoError(t, tm.AdvanceWatermark(1499, fire))
		for i, k := range ks[1500:2000] {
			tm.DeleteEventTimer(k, "", int64(1500+i))
		}
		for i, k := range ks[:700] {
			tm.RegisterEventTimer(k, "again", int64(10_000+i))
		}
		require.NoError(t, tm.AdvanceProcessingTime(49, fire))
		require.Equal(t, 1500+len(ks), fired)
		require.Equal(t, 0, tm.Len(statestore.ProcessingTime))
		require.NoError(t, tm.AdvanceWatermark(math.MaxInt64, fire)) // none left: the records are dropped
		require.Equal(t, 0, tm.Len(statestore.EventTime))
		for _, k := range ks[:1200] {
			tm.RegisterEventTimer(k, "later", 5)
		}

		var got bytes.Buffer
		_, err = s.WriteAndRelease(&got)
		require.NoError(t, err)
		require.Equal(t, want, got.Bytes())
		require.Equal(t, 1200, tm.Len(statestore.EventTime))

		// A snapshot of the fewer timers registered since the queue emptied
		// (it keeps its chunks) has those and no others.
		r := o.all()
		restoreAll(t, r, writeSnapshot(t, b))
		rt := r.TimerService("w")
		require.Equal(t, 1200, rt.Len(statestore.EventTime))
		require.Equal(t, 0, rt.Len(statestore.ProcessingTime))
		for tmr := range rt.Timers(statestore.EventTime) {
			require.Equal(t, "later", tmr.Namespace)
		}
	})
}
