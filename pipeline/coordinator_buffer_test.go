package pipeline

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// bufPending records the buffers PutBuffer gets, copying their bytes.
type bufPending struct {
	parts map[string][]byte
	bufs  [][]byte
	onPut func() // called by PutBuffer first
}

func (p *bufPending) Put(part string, blob []byte) error {
	p.parts[part] = append([]byte(nil), blob...)
	return nil
}

func (p *bufPending) PutBuffer(part string, buf []byte) error {
	if p.onPut != nil {
		p.onPut()
	}
	p.bufs = append(p.bufs, buf)
	return p.Put(part, buf)
}

func (p *bufPending) Complete(context.Context) error { return nil }
func (p *bufPending) Abort() error                   { return nil }

// writeAck encodes a state part into the buffer of the part's previous
// checkpoint, with room for the store's checksum trailer, releases the
// snapshot before the write, and stores what the snapshot encodes.
func TestWriteAckReusesPartBuffer(t *testing.T) {
	be, err := statestore.NewMemory(statestore.Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}})
	require.NoError(t, err)
	v, err := statestore.RegisterValue(be, statestore.ValueDescriptor[string]{Name: "v"})
	require.NoError(t, err)
	var bufs sync.Map
	p := &bufPending{parts: map[string][]byte{}}
	for i, val := range []string{"first value, the longer one", "second"} {
		v.Put("k", "", val)
		snap, err := be.Snapshot()
		require.NoError(t, err)
		want, err := snap.AppendTo(nil)
		require.NoError(t, err)
		p.onPut = func() {
			left, err := snap.AppendTo(nil)
			require.NoError(t, err)
			require.Empty(t, left, "the snapshot is released before the write")
		}
		require.NoError(t, writeAck(p, Ack{Checkpoint: int64(i + 1), States: map[string]statestore.Snapshot{"w": snap}}, nil, &bufs))
		require.Equal(t, want, p.parts["op/w/0"], "checkpoint %d", i+1)
	}
	require.Len(t, p.bufs, 2)
	for _, b := range p.bufs {
		require.GreaterOrEqual(t, cap(b)-len(b), statestore.PartTrailerSize)
	}
	require.Same(t, &p.bufs[0][:1][0], &p.bufs[1][:1][0], "the second checkpoint reuses the first one's buffer")
}
