package statestore

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/prefetch"
)

// prefetchProbe is a state value that records the levels the encoder asks
// it to prefetch, and those it had asked for when it was encoded.
type prefetchProbe struct {
	levels  []int
	encoded []int
}

func (p *prefetchProbe) PrefetchHeld(level int) { p.levels = append(p.levels, level) }

func (p *prefetchProbe) MarshalCBOR() ([]byte, error) { return p.AppendCBOR(nil) }

func (p *prefetchProbe) AppendCBOR(dst []byte) ([]byte, error) {
	p.encoded = append([]int(nil), p.levels...)
	return append(dst, 0xf6), nil
}

// TestEncoderPrefetchesHeldLevels: a snapshot's encoder asks every value
// that is a HeldPrefetcher for level 0 and then level 1, once each and
// before it encodes the value, whether the key group has fewer entries
// than a prefetch batch or many batches and a partial one, and one
// namespace per key or several. Where prefetch is not Enabled it asks none.
func TestEncoderPrefetchesHeldLevels(t *testing.T) {
	for _, tc := range []struct {
		keys, namespaces int
	}{
		{keys: 1, namespaces: 1},
		{keys: 5, namespaces: 1},
		{keys: 16 * 7, namespaces: 1},
		{keys: 16*9 + 3, namespaces: 1},
		{keys: 40, namespaces: 3},
	} {
		t.Run(fmt.Sprintf("%d keys, %d namespaces", tc.keys, tc.namespaces), func(t *testing.T) {
			b, err := NewMemory(Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}})
			require.NoError(t, err)
			v, err := RegisterValue(b, ValueDescriptor[*prefetchProbe]{Name: "v"})
			require.NoError(t, err)
			var probes []*prefetchProbe
			for i := range tc.keys {
				for n := range tc.namespaces {
					p := &prefetchProbe{}
					probes = append(probes, p)
					v.Put(fmt.Sprintf("k%05d", i), fmt.Sprintf("ns%d", n), p)
				}
			}
			snap, err := b.Snapshot()
			require.NoError(t, err)
			_, err = snap.WriteTo(io.Discard)
			require.NoError(t, err)
			snap.Release()
			want := []int{0, 1}
			if !prefetch.Enabled {
				want = nil // the encoder skips prefetching altogether
			}
			for i, p := range probes {
				require.Equal(t, want, p.levels, "value %d", i)
				require.Equal(t, want, p.encoded, "value %d", i)
			}
		})
	}
}

// TestPrefetchStages: the encoder asks for the entries of every state, for
// the objects of pointer values, and for what HeldPrefetchers hold.
func TestPrefetchStages(t *testing.T) {
	require.Equal(t, 1, prefetchStages[int64]())
	require.Equal(t, 1, prefetchStages[prefetchProbe]())
	require.Equal(t, 2, prefetchStages[*int64]())
	require.Equal(t, 4, prefetchStages[*prefetchProbe]())
}
