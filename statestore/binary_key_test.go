package statestore

import (
	"bytes"
	"math/rand/v2"
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
	require.NoError(t, SplitBlobs(buf.Bytes(), func(_ int, blob []byte) error {
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

// A bbolt record key escapes each 0 of the state key as 0, 0xff; splitKey
// and unescape (or appendUnescaped) give the key back, whatever its bytes.
func TestEscapedKeysRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := []byte{0, 0, 0xff, 0xff, 1, 'a'}
	keys := []string{"", "\x00", "\x00\xff", "\xff\x00", "\x00\x00", "a\x00\xff\xffb\x00", "i\x00\x00\x00\x00\x00\x00\x01\x00"}
	for range 2000 {
		k := make([]byte, r.IntN(12))
		for i := range k {
			k[i] = alphabet[r.IntN(len(alphabet))]
		}
		keys = append(keys, string(k))
	}
	for _, key := range keys {
		rec := append(appendKeyPrefix(nil, 3, key), "ns\x00"...)
		esc, ns, err := splitKey(rec)
		require.NoError(t, err, "key %q", key)
		require.Equal(t, "ns\x00", string(ns))
		require.Equal(t, key, unescape(esc), "unescape")
		require.Equal(t, key, string(appendUnescaped([]byte("x"), esc)[1:]), "appendUnescaped")
	}
}
