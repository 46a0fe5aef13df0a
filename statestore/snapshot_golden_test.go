package statestore_test

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenSnapshot is testdata/snapshot-v1.golden: the snapshot (WriteTo) of
// the state goldenState builds, as the encoder wrote it before snapshots
// were encoded by hand in one buffer. Every backend must still write it
// byte for byte: snapshots stay readable by any build, and a checkpoint of
// unchanged state stays the same bytes.
const goldenSnapshot = "testdata/snapshot-v1.golden"

// goldenKeyGroup puts the keys "big-*" into key group 0 (thousands of
// entries in one group: multi-byte CBOR heads) and spreads the others over
// 16 groups.
func goldenKeyGroup(key string) int {
	if strings.HasPrefix(key, "big-") {
		return 0
	}
	return keyGroupOf(key, 16)
}

// goldenState fills be with every kind of state, value types with and
// without a hand-written encoding, expired and live TTL entries, a state
// restored but not registered, and timers of both domains; deterministic.
func goldenState(t *testing.T, open func(testing.TB, statestore.Options) statestore.Backend) statestore.Backend {
	clock := &fakeClock{now: 1_000_000}
	opts := statestore.Options{KeyGroup: goldenKeyGroup, KeyGroups: [2]int{0, 16}, Clock: clock.Now}
	r := rand.New(rand.NewPCG(7, 11))
	text := func() string {
		const alphabet = "abcdefghij\x00é€😀"
		var sb strings.Builder
		for range r.IntN(40) {
			i := r.IntN(len(alphabet))
			sb.WriteString(strings.ToValidUTF8(alphabet[i:i+1], "x"))
		}
		return sb.String()
	}

	// "ghost" is restored into be, but not registered there.
	src := open(t, opts)
	defer func() { _ = src.Close() }()
	ghost, err := statestore.RegisterValue(src, statestore.ValueDescriptor[string]{Name: "ghost"})
	require.NoError(t, err)
	for i := range 50 {
		ghost.Put(fmt.Sprintf("g%d", i), "", text())
	}
	snap, err := src.Snapshot()
	require.NoError(t, err)
	_, ghostBlobs, err := statestoretest.Blobs(snap)
	require.NoError(t, err)
	snap.Release()

	be := open(t, opts)
	t.Cleanup(func() { _ = be.Close() })
	require.NoError(t, be.Restore(ghostBlobs...))

	count, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int64]{Name: "count"})
	require.NoError(t, err)
	ints := []int64{0, 1, -1, 23, 24, -24, -25, 255, 256, 65535, 65536, -65537, math.MaxInt64, math.MinInt64}
	for i := range 300 {
		v := ints[i%len(ints)]
		if i >= len(ints) {
			v = int64(r.Uint64())
		}
		count.Put(fmt.Sprintf("k%d", i), []string{"", "w1", "w2"}[i%3], v)
	}
	big, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int64]{Name: "big"})
	require.NoError(t, err)
	for i := range 3000 {
		big.Put(fmt.Sprintf("big-%d", i), "", int64(i))
	}
	name, err := statestore.RegisterValue(be, statestore.ValueDescriptor[string]{Name: "name"})
	require.NoError(t, err)
	raw, err := statestore.RegisterValue(be, statestore.ValueDescriptor[[]byte]{Name: "raw"})
	require.NoError(t, err)
	flg, err := statestore.RegisterValue(be, statestore.ValueDescriptor[bool]{Name: "flag"})
	require.NoError(t, err)
	flt, err := statestore.RegisterValue(be, statestore.ValueDescriptor[float64]{Name: "float"})
	require.NoError(t, err)
	floats := []float64{0, 1.5, 0.1, -2, math.Inf(1), math.NaN(), 1e300, 65504, 1e-7}
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		name.Put(k, "", text())
		switch i % 3 {
		case 0:
			raw.Put(k, "", nil)
		case 1:
			raw.Put(k, "", []byte{})
		default:
			b := make([]byte, r.IntN(300))
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			raw.Put(k, "", b)
		}
		flg.Put(k, "", i%2 == 0)
		flt.Put(k, "", floats[i%len(floats)])
	}
	box, err := statestore.RegisterAggregating(be, statestoretest.BenchBoxDescriptor())
	require.NoError(t, err)
	boxes, err := statestore.RegisterValue(be, statestore.ValueDescriptor[*statestoretest.BenchBox]{Name: "boxes"})
	require.NoError(t, err)
	for i := range 200 {
		k := fmt.Sprintf("k%d", i)
		for range 1 + i%3 {
			box.Add(k, fmt.Sprintf("w%d", i%4), text())
		}
		if i%5 == 0 {
			boxes.Put(k, "", nil)
		} else {
			boxes.Put(k, "", &statestoretest.BenchBox{N: int64(i), Sum: float64(i) / 3, Last: text(), MaxTime: -int64(i)})
		}
	}
	list, err := statestore.RegisterList(be, statestore.ListDescriptor[string]{Name: "list"})
	require.NoError(t, err)
	for i := range 100 {
		for range i % 4 {
			list.Add(fmt.Sprintf("k%d", i), "", text())
		}
	}
	mp, err := statestore.RegisterMap(be, statestore.MapDescriptor[string, int64]{Name: "map", TTL: 10 * time.Second})
	require.NoError(t, err)
	ttl, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int64]{Name: "ttl", TTL: 5 * time.Second})
	require.NoError(t, err)
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		mp.Put(k, "", "a", int64(i))
		mp.Put(k, "n", "b", int64(-i))
		ttl.Put(k, "", int64(i))
		if i%10 == 9 {
			clock.Advance(1000) // 10 s over the 100 keys: the first ones expire
		}
	}
	for i := range 100 {
		if i%3 == 0 {
			mp.Put(fmt.Sprintf("k%d", i), "", "c", 7) // a map with expired and live entries
		}
	}
	// 24 states more: key "all" has entries in 33 states of its group.
	for s := range 24 {
		v, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int64]{Name: fmt.Sprintf("v%02d", s)})
		require.NoError(t, err)
		v.Put("all", "", int64(s))
		v.Put(fmt.Sprintf("k%d", s), "x", int64(s))
	}
	for _, k := range []string{"all"} {
		count.Put(k, "", 1)
		name.Put(k, "", "all")
		raw.Put(k, "", []byte("all"))
		flg.Put(k, "", true)
		flt.Put(k, "", 2.5)
		box.Add(k, "w", "all")
		boxes.Put(k, "", &statestoretest.BenchBox{N: 1})
		list.Add(k, "", "all")
		mp.Put(k, "", "all", 1)
		ttl.Put(k, "", 1)
	}
	window := be.TimerService("window")
	session := be.TimerService("session")
	for i := range 400 {
		k := fmt.Sprintf("k%d", i%150)
		window.RegisterEventTimer(k, fmt.Sprintf("w%d", i%7), int64(r.IntN(1000))-500)
		if i%4 == 0 {
			window.RegisterProcessingTimer(k, "", 2_000_000+int64(i))
		}
		if i%9 == 0 {
			session.RegisterEventTimer(k, "s", int64(i))
		}
	}
	return be
}

func TestSnapshotGolden(t *testing.T) {
	path := filepath.FromSlash(goldenSnapshot)
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			got := writeSnapshot(t, goldenState(t, bk.open))
			if *update && bk.name == "memory" {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, len(want), len(got), "snapshot size")
			require.True(t, bytes.Equal(want, got), "snapshot bytes differ from %s", goldenSnapshot)
		})
	}
}
