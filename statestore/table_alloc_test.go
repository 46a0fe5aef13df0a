package statestore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	var blobs [][]byte
	require.NoError(t, snap.EncodeGroups(func(_ int, blob []byte) error {
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

// TestKeyPrefixOrder: the encoder's sort by key prefix, then key, orders
// keys as bytes do, for keys shorter and longer than the prefix, with zero
// and 0xff bytes, and keys that are prefixes of each other.
func TestKeyPrefixOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte{0, 1, 'a', 0xff}
	key := func() string {
		b := make([]byte, r.IntN(13))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	sign := func(c int) int { return min(max(c, -1), 1) }
	for range 200_000 {
		a, b := key(), key()
		ka, kb := newKeyedEntry[int](a, nil), newKeyedEntry[int](b, nil)
		ka.pre, kb.pre = keyPrefix(a), keyPrefix(b)
		require.Equal(t, strings.Compare(a, b), sign(compareKeyed(ka, kb)), "%q against %q", a, b)
	}
}

// TestSortKeyed: sortKeyed orders entries as their keys' bytes do, with
// each entry's value moving with its key, for sets below and above the
// radix sort's size, keys that share long prefixes or none, keys that
// are prefixes of each other, and many keys with equal prefixes.
func TestSortKeyed(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	randomKey := func(alphabet []byte, maxLen int) string {
		b := make([]byte, r.IntN(maxLen+1))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	gens := map[string]func(i int) string{
		"random bytes": func(int) string { return randomKey([]byte{0, 1, 'a', 0xff}, 13) },
		"shared prefix": func(int) string {
			return "sensor-" + randomKey([]byte{0, '0', '1', 0xff}, 11)
		},
		"int keys": func(i int) string { // pipeline.EncodeKey of small ints
			return string([]byte{3, 0, 0, 0, 0, 0, byte(i >> 16), byte(i >> 8), byte(i)})
		},
		"prefixes of each other": func(i int) string { return strings.Repeat("\x00", i%40) + strings.Repeat("x", i/40) },
		"equal first 8 bytes":    func(int) string { return "\x01\x02\x03\x04\x05\x06\x07\x08" + randomKey([]byte{0, 7, 0xff}, 4) },
		"equal first 9 bytes":    func(int) string { return "\x01\x02\x03\x04\x05\x06\x07\x08\x09" + randomKey([]byte{0, 7, 0xff}, 9) },
		"equal first 20 bytes":   func(int) string { return strings.Repeat("k", 20) + randomKey([]byte{0, 7, 0xff}, 9) },
	}
	var scratch []keyedEntry[int]
	for name, gen := range gens {
		for _, n := range []int{0, 1, 2, 3, 50, radixSortMin - 1, radixSortMin, 1000, 7700} {
			// owner keeps the keys and entries alive, as a group's map does.
			owner := map[*keyEntry[int]]string{}
			seen := map[string]bool{}
			var es []keyedEntry[int]
			var want []string
			for i := 0; len(es) < n && i < 50*n; i++ {
				k := gen(i)
				if seen[k] {
					continue
				}
				seen[k] = true
				e := &keyEntry[int]{items: make([]slot[int], 1)}
				owner[e] = k
				es = append(es, newKeyedEntry(k, e))
				want = append(want, k)
			}
			slices.Sort(want)
			scratch = sortKeyed(es, scratch)
			require.Len(t, es, len(want))
			for i := range es {
				require.Equal(t, want[i], es[i].key(), "%s, %d keys: entry %d", name, n, i)
				require.Equal(t, es[i].key(), owner[es[i].entry()], "%s, %d keys: the value moved with its key", name, n)
			}
		}
	}
}
