package statestore

import (
	"bytes"
	"math/rand/v2"
	"slices"
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

// randomKeys returns n distinct keys of bytes that sort apart only late or
// only by length: a shared prefix, then a few bytes of 0, 0xff, 1 and 'a'.
func randomKeys(r *rand.Rand, prefix string, n int) []string {
	alphabet := []byte{0, 0xff, 1, 'a'}
	seen := map[string]bool{}
	var keys []string
	for len(keys) < n {
		k := []byte(prefix)
		for range r.IntN(11) {
			k = append(k, alphabet[r.IntN(len(alphabet))])
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, string(k))
		}
	}
	return keys
}

// A snapshot of keys that differ only in late bytes, zeros or their length
// lists them in byte order: the memory backend (which sorts its map's keys)
// writes the same bytes as bbolt (in its cursor's order over escaped keys),
// and its timers, all at one time, are in key order.
func TestSnapshotOrderOfBinaryKeys(t *testing.T) {
	opts := Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}}
	keys := randomKeys(rand.New(rand.NewPCG(5, 6)), "i\x00\x00\x00\x00\x00", 2000)
	mem, err := NewMemory(opts)
	require.NoError(t, err)
	bb, err := NewBolt(BoltOptions{Options: opts, Dir: t.TempDir()})
	require.NoError(t, err)
	defer bb.Close()
	var blobs [2][]byte
	for i, b := range []Backend{mem, bb} {
		v, err := RegisterValue(b, ValueDescriptor[int64]{Name: "v"})
		require.NoError(t, err)
		for j, k := range keys {
			v.Put(k, "", int64(j))
			b.TimerService("w").RegisterEventTimer(k, "", 99)
		}
		blobs[i] = snapshotBytes(t, b)
	}
	require.Equal(t, blobs[1], blobs[0], "memory and bbolt snapshots")

	want := slices.Clone(keys)
	slices.Sort(want)
	restored, err := NewMemory(opts)
	require.NoError(t, err)
	require.NoError(t, SplitBlobs(blobs[0], func(_ int, blob []byte) error { return restored.Restore(blob) }))
	var got []string
	for tm := range restored.TimerService("w").Timers(EventTime) {
		got = append(got, tm.Key)
	}
	require.Equal(t, want, got, "timers in key order")
}
