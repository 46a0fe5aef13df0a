package statestore_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// Tests of what only the bbolt backend has: the live file, the cache, the
// snapshot's read transaction. Everything else runs against every backend
// (backends_test.go).

// modelStates is one state of every kind, TTL variants included, on one
// backend.
type modelStates struct {
	b      statestore.Backend
	val    statestore.ValueState[string]
	ttlVal statestore.ValueState[int64]
	list   statestore.ListState[int64]
	ttlLst statestore.ListState[int64]
	mp     statestore.MapState[string, int64]
	ttlMap statestore.MapState[string, int64]
	red    statestore.ReducingState[int64]
	agg    statestore.AggregatingState[float64, avgAcc, float64]
	tm     *statestore.TimerService
}

func registerModel(t *testing.T, b statestore.Backend) *modelStates {
	t.Helper()
	m := &modelStates{b: b, tm: b.TimerService("timers")}
	var err error
	m.val, err = statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "val"})
	require.NoError(t, err)
	m.ttlVal, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "ttlval", TTL: 3 * time.Second, UpdateOn: statestore.OnReadAndWrite})
	require.NoError(t, err)
	m.list, err = statestore.RegisterList(b, statestore.ListDescriptor[int64]{Name: "list"})
	require.NoError(t, err)
	m.ttlLst, err = statestore.RegisterList(b, statestore.ListDescriptor[int64]{Name: "ttllist", TTL: 4 * time.Second})
	require.NoError(t, err)
	m.mp, err = statestore.RegisterMap(b, statestore.MapDescriptor[string, int64]{Name: "map"})
	require.NoError(t, err)
	m.ttlMap, err = statestore.RegisterMap(b, statestore.MapDescriptor[string, int64]{Name: "ttlmap", TTL: 5 * time.Second})
	require.NoError(t, err)
	m.red, err = statestore.RegisterReducing(b, statestore.ReducingDescriptor[int64]{Name: "sum", Reduce: func(a, b int64) int64 { return a + b }})
	require.NoError(t, err)
	m.agg, err = statestore.RegisterAggregating(b, avgDescriptor("avg"))
	require.NoError(t, err)
	return m
}

// TestBoltMatchesMemory applies the same random operations to a memory
// backend and to a bbolt backend whose cache holds 4 keys (so nearly every
// access loads, and most flush and evict), including writes to other keys
// from inside iterations, and requires the same answer to every read, the
// same Cleanup counts, and byte-identical snapshots all along.
func TestBoltMatchesMemory(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 1500
	}
	for seed := range uint64(3) {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			clock := &fakeClock{now: 1_000_000}
			opts := statestore.Options{KeyGroup: func(k string) int { return keyGroupOf(k, 8) }, KeyGroups: [2]int{0, 8}, Clock: clock.Now}
			mem, err := statestore.NewMemory(opts)
			require.NoError(t, err)
			bb := openBolt(t, opts, 4)
			t.Cleanup(func() { require.NoError(t, bb.Close()) })
			sides := []*modelStates{registerModel(t, mem), registerModel(t, bb)}
			rng := rand.New(rand.NewPCG(seed, 42))
			// Keys with zero bytes (canonical encodings of ints are binary):
			// the file escapes them and must keep their order.
			ks := append(keys(30), "", "\x00", "k\x00", "k\x00\xff", "k\x00\x00", "k\xff")
			nss := []string{"", "a", "b", "c"}
			for step := range steps {
				k, ns := ks[rng.IntN(len(ks))], nss[rng.IntN(len(nss))]
				other := ks[rng.IntN(len(ks))]
				field := "f" + strconv.Itoa(rng.IntN(4))
				n := int64(rng.IntN(100))
				srcs := []string{nss[rng.IntN(len(nss))], nss[rng.IntN(len(nss))]}
				list := make([]int64, rng.IntN(3))
				op := rng.IntN(24)
				// each applies op to one side and returns what it read.
				each := func(m *modelStates) any {
					switch op {
					case 0:
						m.val.Put(k, ns, strconv.Itoa(step))
					case 1:
						v, ok := m.val.Get(k, ns)
						return fmt.Sprint(v, ok)
					case 2:
						m.val.Delete(k, ns)
					case 3:
						m.list.Add(k, ns, n)
						m.ttlLst.AddAll(k, ns, []int64{n, -n})
					case 4:
						return fmt.Sprint(m.list.Get(k, ns), m.ttlLst.Get(k, ns))
					case 5:
						m.list.Update(k, ns, list)
					case 6:
						m.mp.Put(k, ns, field, n)
						m.ttlMap.Put(k, ns, field, n)
					case 7:
						v, ok := m.mp.Get(k, ns, field)
						w, ok2 := m.ttlMap.Get(k, ns, field)
						return fmt.Sprint(v, ok, w, ok2, m.ttlMap.Contains(k, ns, "f0"))
					case 8:
						m.mp.Delete(k, ns, field)
						m.ttlMap.Delete(k, ns, field)
					case 9:
						return fmt.Sprint(maps.Collect(m.mp.Iterate(k, ns)), m.mp.Len(k, ns), maps.Collect(m.ttlMap.Iterate(k, ns)), m.ttlMap.Len(k, ns))
					case 10:
						m.red.Add(k, ns, n)
						m.agg.Add(k, ns, float64(n))
					case 11:
						v, ok := m.red.Get(k, ns)
						a, ok2 := m.agg.Get(k, ns)
						acc, _ := m.agg.Accumulator(k, ns)
						return fmt.Sprint(v, ok, a, ok2, acc)
					case 12:
						m.ttlVal.Put(k, ns, n)
					case 13:
						v, ok := m.ttlVal.Get(k, ns)
						return fmt.Sprint(v, ok)
					case 14:
						m.list.MergeNamespaces(k, ns, srcs...)
						m.red.MergeNamespaces(k, ns, srcs...)
						m.agg.MergeNamespaces(k, ns, srcs...)
						m.ttlLst.MergeNamespaces(k, ns, srcs...)
					case 15:
						m.b.Clear(k, ns)
					case 16:
						m.tm.RegisterEventTimer(k, ns, n)
						m.tm.RegisterProcessingTimer(k, ns, n*2)
					case 17:
						var fired []string
						require.NoError(t, m.tm.AdvanceWatermark(n/2, func(tm statestore.Timer) error {
							fired = append(fired, fmt.Sprint(tm))
							return nil
						}))
						return fired
					case 18:
						c, err := m.b.Cleanup()
						require.NoError(t, err)
						return c
					case 19:
						// Delete every namespace while iterating them, and write
						// to another key from the body (which evicts).
						var got []string
						for x := range m.val.Namespaces(k) {
							got = append(got, x)
							m.val.Delete(k, x)
							m.red.Add(other, x, 1)
						}
						slices.Sort(got)
						return got
					case 20:
						// Keys of a key group, changing other keys from the body.
						g := keyGroupOf(k, 8)
						var got []string
						for key := range m.ttlVal.Keys(g) {
							got = append(got, key)
							m.val.Put(key+"x", "", "k")
							if len(key)%2 == 0 { // by the key, not its position: orders differ
								m.ttlVal.Delete(key, "")
							}
						}
						slices.Sort(got)
						return got
					case 21:
						// Delete while iterating a map.
						var got []string
						for f, v := range m.mp.Iterate(k, ns) {
							got = append(got, f)
							if v%2 == 0 {
								m.mp.Delete(k, ns, f)
							}
							m.red.Add(other, "", v) // commutes: iteration orders differ
						}
						slices.Sort(got)
						return got
					case 22:
						var names []string
						for _, name := range m.b.StateNames() {
							st, err := m.b.State(name)
							require.NoError(t, err)
							nsl := slices.Sorted(st.Namespaces(k))
							names = append(names, name+":"+strings.Join(nsl, ","))
						}
						return names
					}
					return nil
				}
				if op == 23 {
					clock.Advance(int64(rng.IntN(2500)))
					continue
				}
				want, got := each(sides[0]), each(sides[1])
				require.Equal(t, want, got, "step %d, op %d, key %s, ns %q", step, op, k, ns)
				require.NoError(t, mem.Err())
				require.NoError(t, bb.Err())
				require.NoError(t, statestore.CheckBoltCache(bb), "step %d, op %d", step, op)
				if step%250 == 0 {
					require.Equal(t, snapshotBlobs(t, mem), snapshotBlobs(t, bb), "step %d", step)
				}
			}
			blobs := snapshotBlobs(t, mem)
			require.Equal(t, blobs, snapshotBlobs(t, bb))
			// And each restores into the other.
			toMem, err := statestore.NewMemory(opts)
			require.NoError(t, err)
			require.NoError(t, toMem.Restore(inRange(snapshotBlobs(t, bb), 0, 8)...))
			toBolt := openBolt(t, opts, 4)
			t.Cleanup(func() { require.NoError(t, toBolt.Close()) })
			require.NoError(t, toBolt.Restore(inRange(blobs, 0, 8)...))
			registerModel(t, toMem)
			registerModel(t, toBolt)
			require.Equal(t, blobs, snapshotBlobs(t, toMem))
			require.Equal(t, blobs, snapshotBlobs(t, toBolt))
		})
	}
}

func TestBoltLiveFile(t *testing.T) {
	opts := statestore.Options{KeyGroup: func(k string) int { return keyGroupOf(k, 4) }, KeyGroups: [2]int{0, 4}}

	t.Run("a file of an earlier run is replaced; Close removes file and directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "live", "step-0")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		path := filepath.Join(dir, statestore.BoltFileName)
		require.NoError(t, os.WriteFile(path, []byte("torn by a crash"), 0o600))
		b, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: dir})
		require.NoError(t, err)
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		v.Put("k", "", 1)
		got, ok := v.Get("k", "")
		require.True(t, ok)
		require.Equal(t, 1, got)
		st, err := os.Stat(path)
		require.NoError(t, err)
		require.Greater(t, st.Size(), int64(len("torn by a crash")))
		require.NoError(t, b.Close())
		_, err = os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist)
		_, err = os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist)
		require.NoError(t, b.Close(), "Close twice")
	})

	t.Run("Close keeps a directory that holds other files", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "other"), nil, 0o600))
		b, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: dir})
		require.NoError(t, err)
		require.NoError(t, b.Close())
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1)
		require.Equal(t, "other", entries[0].Name())
	})

	t.Run("invalid options", func(t *testing.T) {
		_, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: t.TempDir(), CacheEntries: -1})
		require.ErrorIs(t, err, statestore.ErrInvalidOptions)
		_, err = statestore.NewBolt(statestore.BoltOptions{Options: statestore.Options{KeyGroups: [2]int{0, 4}}, Dir: t.TempDir()})
		require.ErrorIs(t, err, statestore.ErrInvalidOptions)
	})

	t.Run("a directory that cannot be created", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, nil, 0o600))
		_, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: filepath.Join(file, "sub")})
		require.ErrorContains(t, err, "create live state directory")
	})

	t.Run("a write the file refuses is a sticky error", func(t *testing.T) {
		b := openBolt(t, opts, 2)
		t.Cleanup(func() { _ = b.Close() })
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		huge := strings.Repeat("k", 40_000) // over bbolt's key size limit
		v.Put(huge, "", 1)
		require.NoError(t, b.Err(), "still in the cache")
		_, err = b.Snapshot()
		require.ErrorContains(t, err, "write key")
		require.ErrorIs(t, b.Err(), err)
		_, err = b.Snapshot()
		require.ErrorIs(t, err, b.Err())
	})

	t.Run("a write refused in a flush in flight fails the backend; the flush's keys stay cached", func(t *testing.T) {
		b := openBolt(t, opts, 4)
		t.Cleanup(func() { _ = b.Close() })
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		want := map[string]int{"a": 1, "b": 2, "c": 3}
		for k, n := range want {
			v.Put(k, "", n)
		}
		v.Put(strings.Repeat("k", 40_000), "", 4) // over bbolt's key size limit
		v.Put("d", "", 5)                         // a full cache: the four keys' flush starts
		require.NoError(t, b.Err(), "the flush has not landed")
		v.Put("e", "", 6) // full again: the failed flush lands
		require.ErrorContains(t, b.Err(), "write key")
		// More loads into the full cache evict, but not a, b and c: the
		// file does not hold them.
		for i := range 8 {
			v.Put("f"+strconv.Itoa(i), "", 7+i)
			want["f"+strconv.Itoa(i)] = 7 + i
		}
		want["d"], want["e"] = 5, 6
		for k, n := range want {
			got, ok := v.Get(k, "")
			require.True(t, ok, k)
			require.Equal(t, n, got, k)
		}
		_, err = b.Snapshot()
		require.ErrorIs(t, err, b.Err())
	})
}

func TestBoltSnapshotLifetime(t *testing.T) {
	opts := statestore.Options{KeyGroup: func(k string) int { return keyGroupOf(k, 16) }, KeyGroups: [2]int{0, 16}}
	fill := func(t *testing.T, b statestore.Backend) statestore.ValueState[int] {
		v, err := statestore.RegisterValue(b, statestore.ValueDescriptor[int]{Name: "v"})
		require.NoError(t, err)
		for i, k := range keys(200) {
			v.Put(k, "", i)
		}
		return v
	}

	t.Run("Close ends snapshots nobody released", func(t *testing.T) {
		b := openBolt(t, opts, 0)
		fill(t, b)
		s, err := b.Snapshot()
		require.NoError(t, err)
		_, err = b.Snapshot() // dropped: never encoded, never released
		require.NoError(t, err)
		require.NoError(t, b.Close())
		_, err = s.WriteTo(&bytes.Buffer{})
		require.ErrorIs(t, err, statestore.ErrClosed)
		s.Release()
	})

	t.Run("a released snapshot encodes nothing", func(t *testing.T) {
		b := openBolt(t, opts, 0)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		fill(t, b)
		s, err := b.Snapshot()
		require.NoError(t, err)
		s.Release()
		s.Release()
		n, err := s.WriteTo(&bytes.Buffer{})
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("Close waits for the snapshot being encoded", func(t *testing.T) {
		b := openBolt(t, opts, 0)
		v := fill(t, b)
		want := snapshotBlobs(t, b)
		s, err := b.Snapshot()
		require.NoError(t, err)
		v.Put(keys(1)[0], "", -1) // after the snapshot: not in it
		started, resume := make(chan struct{}), make(chan struct{})
		got := map[int][]byte{}
		var encErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			first := true
			var stream bytes.Buffer
			_, encErr = s.WriteTo(writerFunc(func(blob []byte) (int, error) {
				if first {
					first = false
					close(started)
					<-resume
				}
				return stream.Write(blob)
			}))
			if encErr == nil {
				encErr = statestore.SplitBlobs(stream.Bytes(), func(g int, blob []byte) error {
					got[g] = blob
					return nil
				})
			}
		})
		<-started
		closed := make(chan error, 1)
		go func() { closed <- b.Close() }()
		close(resume)
		wg.Wait()
		require.NoError(t, <-closed)
		require.NoError(t, encErr)
		require.Equal(t, want, got)
		_, err = s.WriteTo(&bytes.Buffer{})
		require.ErrorIs(t, err, statestore.ErrClosed)
	})

	t.Run("accessors after Close record ErrClosed", func(t *testing.T) {
		b := openBolt(t, opts, 0)
		v := fill(t, b)
		require.NoError(t, b.Close())
		v.Put("new", "", 1)
		require.ErrorIs(t, b.Err(), statestore.ErrClosed)
		_, err := b.Cleanup()
		require.ErrorIs(t, err, statestore.ErrClosed)
		require.ErrorIs(t, b.Restore(), statestore.ErrClosed)
	})
}

// TestBoltRestoreFillsPages: a restore writes its records in key order,
// so it fills the live file's pages (to 90%) instead of splitting them
// half full as bbolt does by default, registered before the restore or
// after it.
func TestBoltRestoreFillsPages(t *testing.T) {
	opts := statestore.Options{KeyGroup: func(k string) int { return keyGroupOf(k, 4) }, KeyGroups: [2]int{0, 4}}
	src := openBolt(t, opts, 0)
	t.Cleanup(func() { _ = src.Close() })
	v, err := statestore.RegisterValue(src, statestore.ValueDescriptor[string]{Name: "v"})
	require.NoError(t, err)
	for i := range 5000 {
		v.Put(fmt.Sprintf("key-%d", i), "", strings.Repeat("x", 300))
	}
	blobs := inRange(snapshotBlobs(t, src), 0, 4)
	for _, registerFirst := range []bool{true, false} {
		t.Run("register-before-restore="+strconv.FormatBool(registerFirst), func(t *testing.T) {
			dst := openBolt(t, opts, 0)
			t.Cleanup(func() { _ = dst.Close() })
			register := func() {
				_, err := statestore.RegisterValue(dst, statestore.ValueDescriptor[string]{Name: "v"})
				require.NoError(t, err)
			}
			if registerFirst {
				register()
			}
			require.NoError(t, dst.Restore(blobs...))
			if !registerFirst {
				register()
			}
			fill, err := statestore.BoltLeafFill(dst, "v")
			require.NoError(t, err)
			t.Logf("leaf pages %.0f%% full", fill*100)
			require.Greater(t, fill, 0.8)
		})
	}
}

// TestBoltRegisterAfterRestoreKeepsRecords: registering a state after
// Restore checks its restored records with the descriptor but writes back
// only those that change (expired ones, deleted), not the whole state again.
func TestBoltRegisterAfterRestoreKeepsRecords(t *testing.T) {
	opts := statestore.Options{KeyGroup: func(k string) int { return keyGroupOf(k, 4) }, KeyGroups: [2]int{0, 4}}
	src := openBolt(t, opts, 0)
	t.Cleanup(func() { _ = src.Close() })
	v, err := statestore.RegisterValue(src, statestore.ValueDescriptor[string]{Name: "v"})
	require.NoError(t, err)
	for i := range 2000 {
		v.Put(fmt.Sprintf("key-%d", i), "", strings.Repeat("x", 100))
	}
	blobs := inRange(snapshotBlobs(t, src), 0, 4)

	dst := openBolt(t, opts, 0)
	t.Cleanup(func() { _ = dst.Close() })
	require.NoError(t, dst.Restore(blobs...))
	before := statestore.BoltPageWrites(dst)
	w, err := statestore.RegisterValue(dst, statestore.ValueDescriptor[string]{Name: "v"})
	require.NoError(t, err)
	require.LessOrEqual(t, statestore.BoltPageWrites(dst)-before, int64(2), "a commit writes its meta and freelist pages, no state")
	got, ok := w.Get("key-1999", "")
	require.True(t, ok)
	require.Equal(t, strings.Repeat("x", 100), got)
	require.NoError(t, statestore.CheckBoltCache(dst))
}

// writerFunc is an io.Writer that calls itself.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
