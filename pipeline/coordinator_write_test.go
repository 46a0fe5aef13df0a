package pipeline

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// putPending keeps what Put gets: a store without streamed parts.
type putPending struct{ parts map[string][]byte }

func (p *putPending) Put(part string, blob []byte) error {
	p.parts[part] = append([]byte(nil), blob...)
	return nil
}
func (p *putPending) Complete(context.Context) error { return nil }
func (p *putPending) Abort() error                   { return nil }

// writeAck streams a state part into the checkpoint store (a file of its
// own), releasing the snapshot before the part is fsynced, and stores the
// bytes the snapshot encodes; a store without streamed parts gets the same
// bytes through Put.
func TestWriteAckStreamsStateParts(t *testing.T) {
	be, err := statestore.NewMemory(statestore.Options{KeyGroup: func(k string) int { return len(k) % 4 }, KeyGroups: [2]int{0, 4}})
	require.NoError(t, err)
	v, err := statestore.RegisterValue(be, statestore.ValueDescriptor[string]{Name: "v"})
	require.NoError(t, err)
	for _, k := range []string{"a", "bb", "ccc", "dddd", "eeeee"} {
		v.Put(k, "", "value of "+k)
	}

	var snap statestore.Snapshot
	synced := 0
	dir := t.TempDir()
	store, err := statestore.OpenCheckpointStore(dir, statestore.CheckpointStoreOptions{Faults: statestore.CheckpointFaultFuncs{
		FileFunc: func(op statestore.CheckpointOp, _ string) error {
			if op == statestore.OpPartSync {
				synced++
				left, err := snap.AppendTo(nil)
				require.NoError(t, err)
				require.Empty(t, left, "the snapshot is released before the part is fsynced")
			}
			return nil
		},
	}})
	require.NoError(t, err)
	defer store.Close(context.Background())

	snap, err = be.Snapshot()
	require.NoError(t, err)
	want, err := snap.AppendTo(nil)
	require.NoError(t, err)
	require.NotEmpty(t, want)
	p, err := BoltCheckpoints(store).Begin(1, CheckpointMeta{Pipeline: "p"})
	require.NoError(t, err)
	require.NoError(t, writeAck(p, Ack{Checkpoint: 1, Subtask: 2, States: map[string]statestore.Snapshot{"w": snap}},
		map[string][]byte{"src/gen/2": []byte("pos")}))
	require.Equal(t, 1, synced, "the state part was streamed to a file")
	require.NoError(t, p.Complete(context.Background()))
	cp, err := store.Latest(context.Background())
	require.NoError(t, err)
	defer cp.Close()
	got, err := cp.Get("op/w/2")
	require.NoError(t, err)
	require.Equal(t, want, got)
	pos, err := cp.Get("src/gen/2")
	require.NoError(t, err)
	require.Equal(t, []byte("pos"), pos)

	snap, err = be.Snapshot()
	require.NoError(t, err)
	pp := &putPending{parts: map[string][]byte{}}
	require.NoError(t, writeAck(pp, Ack{Checkpoint: 2, States: map[string]statestore.Snapshot{"w": snap}}, nil))
	require.Equal(t, want, pp.parts["op/w/0"])
}
