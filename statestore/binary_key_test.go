package statestore

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// Keys and namespaces are canonical encodings (an int key is a type byte and
// 8 raw bytes), not text: they must survive a snapshot whatever their bytes.
func TestBinaryKeysSurviveSnapshots(t *testing.T) {
	opts := Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}}
	key, ns := "i\x00\x00\x00\x00\x00\x00\x00\xff", "\xfe\xff"
	b, err := NewMemory(opts)
	require.NoError(t, err)
	v, err := RegisterValue(b, ValueDescriptor[int64]{Name: "v"})
	require.NoError(t, err)
	v.Put(key, ns, 42)
	snap, err := b.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)

	restored, err := NewMemory(opts)
	require.NoError(t, err)
	var blobs [][]byte
	require.NoError(t, ReadBlobs(&buf, func(_ int, blob []byte) error {
		blobs = append(blobs, blob)
		return nil
	}))
	require.NoError(t, restored.Restore(blobs...))
	rv, err := RegisterValue(restored, ValueDescriptor[int64]{Name: "v"})
	require.NoError(t, err)
	got, ok := rv.Get(key, ns)
	require.True(t, ok)
	require.Equal(t, int64(42), got)
}
