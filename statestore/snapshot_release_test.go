package statestore_test

import (
	"bytes"
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
		f := registerAll(t, b)
		for i, k := range keys(300) {
			f.fill(k, i)
		}
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
