package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/statestore"
)

// putPending keeps what Put gets, and a created part once it is closed: a
// store without part files or delta parts.
type putPending struct{ parts map[string][]byte }

// Create refuses delta parts (checkpoint.ErrDeltaBase), as a store does
// whose base part is gone.
func (p *putPending) Create(part string, base int64) (checkpoint.PartWriter, error) {
	if base != 0 {
		return nil, fmt.Errorf("create part %q: %w", part, checkpoint.ErrDeltaBase)
	}
	return &bufPart{p: p, name: part}, nil
}

// bufPart is putPending's PartWriter: Close Puts what was written.
type bufPart struct {
	bytes.Buffer
	p    *putPending
	name string
}

func (w *bufPart) Close() error { return w.p.Put(w.name, w.Bytes()) }
func (w *bufPart) Abort()       {}

func (p *putPending) Put(part string, blob []byte) error {
	p.parts[part] = append([]byte(nil), blob...)
	return nil
}
func (p *putPending) Complete(context.Context) error { return nil }
func (p *putPending) Abort() error                   { return nil }

// writeAck streams a state part into the checkpoint store (a file of its
// own), releasing the snapshot before the part is fsynced, and stores the
// bytes the snapshot encodes; another store gets the same bytes through its
// PartWriter.
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
	store, err := checkpoint.Open(dir, checkpoint.Options{Faults: checkpoint.FaultFuncs{
		FileFunc: func(op checkpoint.Op, _ string) error {
			if op == checkpoint.OpPartSync {
				synced++
				var left bytes.Buffer
				_, err := snap.WriteTo(&left)
				require.NoError(t, err)
				require.Zero(t, left.Len(), "the snapshot is released before the part is fsynced")
			}
			return nil
		},
	}})
	require.NoError(t, err)
	defer store.Close(context.Background())

	snap, err = be.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	want := buf.Bytes()
	require.NotEmpty(t, want)
	p, err := store.Begin(1, checkpoint.Meta{Pipeline: "p"})
	require.NoError(t, err)
	st, err := writeAck(p, Ack{Checkpoint: 1, Subtask: 2, States: map[string]statestore.Snapshot{"w": snap}},
		map[string][]byte{"src/gen/2": []byte("pos")})
	require.NoError(t, err)
	require.Equal(t, partStats{bytes: int64(len(want))}, st)
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
	_, err = writeAck(pp, Ack{Checkpoint: 2, States: map[string]statestore.Snapshot{"w": snap}}, nil)
	require.NoError(t, err)
	require.Equal(t, want, pp.parts["op/w/0"])
}

// A bbolt backend's checkpoint snapshot that is a delta goes into a delta
// part on its base, which reads back as the full snapshot; where the base
// is gone, or the store takes no delta parts, the snapshot is written in
// full.
func TestWriteAckDeltaParts(t *testing.T) {
	ctx := context.Background()
	be, err := statestore.NewBolt(statestore.BoltOptions{
		Options: statestore.Options{KeyGroup: func(k string) int { return len(k) % 4 }, KeyGroups: [2]int{0, 4}, Incremental: true},
		Dir:     t.TempDir(),
	})
	require.NoError(t, err)
	defer be.Close()
	v, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int]{Name: "v"})
	require.NoError(t, err)
	for i := range 100 {
		v.Put(fmt.Sprint("key", i), "", i)
	}
	store, err := checkpoint.Open(t.TempDir(), checkpoint.Options{Retain: 1})
	require.NoError(t, err)
	defer store.Close(ctx)

	// checkpoint writes checkpoint id of be into s, completes it, and
	// returns the part's info and bytes, and the full snapshot they must
	// equal.
	readCheckpoint := func(s CheckpointStore, id int64) (checkpoint.PartInfo, []byte, []byte) {
		snap, err := be.SnapshotCheckpoint(id)
		require.NoError(t, err)
		full := writeFull(t, be)
		p, err := s.Begin(id, checkpoint.Meta{Pipeline: "p"})
		require.NoError(t, err)
		st, err := writeAck(p, Ack{Checkpoint: id, States: map[string]statestore.Snapshot{"w": snap}}, nil)
		require.NoError(t, err)
		require.NoError(t, p.Complete(ctx))
		be.CheckpointCompleted(id)
		if s, ok := s.(*checkpoint.Store); ok {
			cp, err := s.Checkpoint(ctx, id)
			require.NoError(t, err)
			defer cp.Close()
			got, err := cp.Get("op/w/0")
			require.NoError(t, err)
			info := cp.Parts()[0]
			require.Equal(t, partStats{bytes: info.Size, deltas: min(1, int(info.Base))}, st)
			return info, got, full
		}
		return checkpoint.PartInfo{}, nil, full
	}
	info, got, full := readCheckpoint(store, 1)
	require.Zero(t, info.Base)
	require.Equal(t, full, got)
	size := info.Size
	for id := int64(2); id <= 3; id++ {
		v.Put(fmt.Sprint("key", id), "", -1)
		v.Delete(fmt.Sprint("key", id+10), "")
		info, got, full = readCheckpoint(store, id)
		require.Equal(t, id-1, info.Base, "checkpoint %d", id)
		require.Less(t, info.Size, size/4, "checkpoint %d", id)
		require.Equal(t, full, got, "checkpoint %d", id)
	}

	// Another store has no checkpoint 3: the delta on it is written in full.
	other, err := checkpoint.Open(t.TempDir(), checkpoint.Options{})
	require.NoError(t, err)
	defer other.Close(ctx)
	v.Put("key50", "", -1)
	info, got, full = readCheckpoint(other, 4)
	require.Zero(t, info.Base)
	require.Equal(t, full, got)

	// The next delta builds on checkpoint 4, wherever it was written; a
	// store without delta parts gets it in full.
	v.Put("key51", "", -1)
	snap, err := be.SnapshotCheckpoint(5)
	require.NoError(t, err)
	require.Equal(t, int64(4), snap.(statestore.DeltaSnapshot).Base())
	full = writeFull(t, be)
	pp := &putPending{parts: map[string][]byte{}}
	st, err := writeAck(pp, Ack{Checkpoint: 5, States: map[string]statestore.Snapshot{"w": snap}}, nil)
	require.NoError(t, err)
	require.Equal(t, full, pp.parts["op/w/0"])
	require.Equal(t, partStats{bytes: int64(len(full))}, st)
}

// writeFull returns the bytes of a full snapshot of b.
func writeFull(t *testing.T, b statestore.Backend) []byte {
	snap, err := b.Snapshot()
	require.NoError(t, err)
	defer snap.Release()
	var full bytes.Buffer
	_, err = snap.WriteTo(&full)
	require.NoError(t, err)
	return full.Bytes()
}
