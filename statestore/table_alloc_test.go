package statestore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCopyOnWriteAllocations: the first write to a key after a snapshot
// copies its entry; an entry of one namespace and its slot are one object
// (keyEntry.one), so the copy is one allocation; two namespaces need their
// own array. The snapshot still holds the values it saw.
func TestCopyOnWriteAllocations(t *testing.T) {
	for _, tc := range []struct {
		namespaces []string
		allocs     float64
	}{
		{[]string{""}, 1},
		{[]string{"a", "b"}, 2},
	} {
		b, err := NewMemory(Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}})
		require.NoError(t, err)
		v, err := RegisterValue(b, ValueDescriptor[int64]{Name: "v"})
		require.NoError(t, err)
		keys := make([]string, 10)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i)
			for _, ns := range tc.namespaces {
				v.Put(keys[i], ns, 1)
			}
		}
		snap, err := b.Snapshot()
		require.NoError(t, err)
		v.Put(keys[0], tc.namespaces[0], 2) // copies the key group's map
		next := 1
		got := testing.AllocsPerRun(3, func() {
			v.Put(keys[next], tc.namespaces[0], 2)
			next++
		})
		require.Equal(t, tc.allocs, got, "namespaces %q", tc.namespaces)

		rv := restoreValues(t, snap)
		for _, k := range keys {
			for _, ns := range tc.namespaces {
				got, ok := rv.Get(k, ns)
				require.True(t, ok)
				require.Equal(t, int64(1), got, "%s/%s: the snapshot's value", k, ns)
			}
		}
	}
}

// restoreValues restores snap, of a one-group memory backend with the
// int64 value state "v", into a new one and returns its state "v".
func restoreValues(t *testing.T, snap Snapshot) ValueState[int64] {
	t.Helper()
	restored, err := NewMemory(Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}})
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = snap.WriteTo(&buf)
	require.NoError(t, err)
	var blobs [][]byte
	require.NoError(t, SplitBlobs(buf.Bytes(), func(_ int, blob []byte) error {
		blobs = append(blobs, blob)
		return nil
	}))
	require.NoError(t, restored.Restore(blobs...))
	rv, err := RegisterValue(restored, ValueDescriptor[int64]{Name: "v"})
	require.NoError(t, err)
	return rv
}

// TestReleasedSnapshotStopsCopying: writes copy what a live snapshot
// shares and nothing else. With two snapshots, releasing the newer (twice:
// the second call does nothing) leaves the older one's values copied on
// write and written in place what only the newer shared; the older one
// still encodes the values it saw. Once it is released too, writes copy
// nothing.
func TestReleasedSnapshotStopsCopying(t *testing.T) {
	b, err := NewMemory(Options{KeyGroup: func(string) int { return 0 }, KeyGroups: [2]int{0, 1}})
	require.NoError(t, err)
	v, err := RegisterValue(b, ValueDescriptor[int64]{Name: "v"})
	require.NoError(t, err)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		v.Put(keys[i], "", 1)
	}
	older, err := b.Snapshot()
	require.NoError(t, err)
	for _, k := range keys[:5] {
		v.Put(k, "", 2) // copies the key group's map and k0 to k4
	}
	newer, err := b.Snapshot()
	require.NoError(t, err)
	newer.Release()
	newer.Release()

	next := 0
	require.Equal(t, 0.0, testing.AllocsPerRun(3, func() {
		v.Put(keys[next], "", 3)
		next++
	}), "k0 to k3 were copied after the older snapshot: only the released one shared them")
	next = 5
	require.Equal(t, 1.0, testing.AllocsPerRun(3, func() {
		v.Put(keys[next], "", 3)
		next++
	}), "the older snapshot still shares the other keys")

	rv := restoreValues(t, older)
	for _, k := range keys {
		got, ok := rv.Get(k, "")
		require.True(t, ok)
		require.Equal(t, int64(1), got, "%s: the older snapshot's value", k)
	}

	older.Release()
	require.Equal(t, 0.0, testing.AllocsPerRun(3, func() {
		v.Put(keys[next], "", 4)
		next++
	}), "no live snapshot: writes copy nothing")
	for i, k := range keys {
		want := int64(1)
		switch {
		case i < 4 || i >= 5 && i < 9:
			want = 3
		case i == 4:
			want = 2
		case i < next:
			want = 4
		}
		got, ok := v.Get(k, "")
		require.True(t, ok)
		require.Equal(t, want, got, "%s: the live value", k)
	}
}

// TestEntryMovesOutOfOne: a second namespace moves the slots to an array of
// their own, and the entry's inline slot keeps nothing alive.
func TestEntryMovesOutOfOne(t *testing.T) {
	a, b := 1, 2
	e := newKeyEntry[*int](1)
	e.items[e.add("a")].v = &a
	require.Same(t, &e.one[0], &e.items[0])
	e.items[e.add("b")].v = &b
	require.NotSame(t, &e.one[0], &e.items[0])
	require.Nil(t, e.one[0].v)
	require.Same(t, &a, e.items[e.find("a")].v)
	require.Same(t, &b, e.items[e.find("b")].v)
}
