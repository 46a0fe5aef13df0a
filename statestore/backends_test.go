package statestore_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// backends lists every Backend implementation. Every backend test runs
// against each (nats-server's store permutations): a new backend adds one
// line here.
var backends = []struct {
	name string
	open func(t testing.TB, opts statestore.Options) statestore.Backend
}{
	{"memory", func(t testing.TB, opts statestore.Options) statestore.Backend {
		b, err := statestore.NewMemory(opts)
		require.NoError(t, err)
		return b
	}},
	{"bbolt", func(t testing.TB, opts statestore.Options) statestore.Backend {
		return openBolt(t, opts, 0)
	}},
	// A cache of 32 keys: most tests then evict, flush and load keys again.
	{"bbolt-evicting", func(t testing.TB, opts statestore.Options) statestore.Backend {
		return openBolt(t, opts, 32)
	}},
}

// openBolt opens a bbolt backend with a cache of cacheEntries keys (0: the
// default) in a new temporary directory.
func openBolt(t testing.TB, opts statestore.Options, cacheEntries int) *statestore.Bolt {
	b, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: t.TempDir(), CacheEntries: cacheEntries})
	require.NoError(t, err)
	return b
}

// opener opens backends of one implementation that share a clock and a
// number of key groups.
type opener struct {
	t      testing.TB
	open   func(t testing.TB, opts statestore.Options) statestore.Backend
	maxPar int
	clock  *fakeClock
}

// forEachBackend runs fn once per backend implementation, as a subtest.
func forEachBackend(t *testing.T, fn func(t *testing.T, o *opener)) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			fn(t, &opener{t: t, open: bk.open, maxPar: 16, clock: &fakeClock{now: 1_000_000}})
		})
	}
}

func (o *opener) keyGroup(key string) int { return keyGroupOf(key, o.maxPar) }

func keyGroupOf(key string, maxPar int) int { return int(xxhash.Sum64String(key) % uint64(maxPar)) }

// all opens a backend that owns every key group.
func (o *opener) all() statestore.Backend { return o.rng(0, o.maxPar) }

// rng opens a backend that owns key groups [start, end).
func (o *opener) rng(start, end int) statestore.Backend {
	b := o.open(o.t, statestore.Options{KeyGroup: o.keyGroup, KeyGroups: [2]int{start, end}, Clock: o.clock.Now})
	o.t.Cleanup(func() { _ = b.Close() })
	return b
}

// subtask opens the backend of subtask sub of p (its contiguous range of key groups).
func (o *opener) subtask(sub, p int) statestore.Backend {
	start, end := keyGroupRange(sub, p, o.maxPar)
	return o.rng(start, end)
}

// keyGroupRange is pipeline.KeyGroupRange (statestore may not import it).
func keyGroupRange(sub, p, maxPar int) (start, end int) {
	return (sub*maxPar + p - 1) / p, ((sub+1)*maxPar + p - 1) / p
}

type fakeClock struct{ now int64 }

func (c *fakeClock) Now() int64       { return c.now }
func (c *fakeClock) Advance(ms int64) { c.now += ms }

// keys returns n keys "k0", "k1", ...
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "k" + strconv.Itoa(i)
	}
	return ks
}

// avgAcc is an accumulator of an average.
type avgAcc struct {
	Sum float64
	N   int64
}

func avgDescriptor(name string) statestore.AggregatingDescriptor[float64, avgAcc, float64] {
	return statestore.AggregatingDescriptor[float64, avgAcc, float64]{
		Name:   name,
		Add:    func(a avgAcc, v float64) avgAcc { return avgAcc{a.Sum + v, a.N + 1} },
		Merge:  func(a, b avgAcc) avgAcc { return avgAcc{a.Sum + b.Sum, a.N + b.N} },
		Result: func(a avgAcc) float64 { return a.Sum / float64(a.N) },
	}
}

// fixture holds one state of every kind and a timer service.
type fixture struct {
	val  statestore.ValueState[string]
	list statestore.ListState[int64]
	mp   statestore.MapState[string, float64]
	red  statestore.ReducingState[int64]
	agg  statestore.AggregatingState[float64, avgAcc, float64]
	ttl  statestore.ValueState[int64] // TTL 1h, restarted on reads
	tm   *statestore.TimerService
}

func registerAll(t testing.TB, b statestore.Backend) *fixture {
	t.Helper()
	var f fixture
	var err error
	f.val, err = statestore.RegisterValue(b, statestore.ValueDescriptor[string]{Name: "val"})
	require.NoError(t, err)
	f.list, err = statestore.RegisterList(b, statestore.ListDescriptor[int64]{Name: "list"})
	require.NoError(t, err)
	f.mp, err = statestore.RegisterMap(b, statestore.MapDescriptor[string, float64]{Name: "map"})
	require.NoError(t, err)
	f.red, err = statestore.RegisterReducing(b, statestore.ReducingDescriptor[int64]{Name: "sum", Reduce: func(a, b int64) int64 { return a + b }})
	require.NoError(t, err)
	f.agg, err = statestore.RegisterAggregating(b, avgDescriptor("avg"))
	require.NoError(t, err)
	f.ttl, err = statestore.RegisterValue(b, statestore.ValueDescriptor[int64]{Name: "ttl", TTL: time.Hour, UpdateOn: statestore.OnReadAndWrite})
	require.NoError(t, err)
	f.tm = b.TimerService("window")
	return &f
}

// filled registers every state on b and fills keys(n), key i with i.
func filled(t testing.TB, b statestore.Backend, n int) *fixture {
	t.Helper()
	f := registerAll(t, b)
	for i, k := range keys(n) {
		f.fill(k, i)
	}
	return f
}

// fill writes something to every state and a timer of each domain for key,
// depending on i.
func (f *fixture) fill(key string, i int) {
	ns := "w" + strconv.Itoa(i%3)
	f.val.Put(key, ns, fmt.Sprintf("v%d", i))
	f.list.Add(key, ns, int64(i))
	f.mp.Put(key, "", "f"+strconv.Itoa(i%5), float64(i)/2)
	f.red.Add(key, "", int64(i))
	f.agg.Add(key, ns, float64(i))
	f.ttl.Put(key, "", int64(i))
	f.tm.RegisterEventTimer(key, ns, int64(1000+i%7))
	f.tm.RegisterProcessingTimer(key, "", int64(2000+i%11))
}

// dumpAll reads every state and timer of b through the public API into a
// comparable map.
func dumpAll(t testing.TB, b statestore.Backend, f *fixture) map[string]string {
	t.Helper()
	out := map[string]string{}
	start, end := b.KeyGroupRange()
	for _, name := range b.StateNames() {
		st, err := b.State(name)
		require.NoError(t, err)
		for g := start; g < end; g++ {
			for key := range st.Keys(g) {
				for ns := range st.Namespaces(key) {
					id := name + "/" + key + "/" + ns
					switch name {
					case "val":
						v, ok := f.val.Get(key, ns)
						require.True(t, ok, id)
						out[id] = v
					case "list":
						out[id] = fmt.Sprint(f.list.Get(key, ns))
					case "map":
						m := maps.Collect(f.mp.Iterate(key, ns))
						require.Equal(t, len(m), f.mp.Len(key, ns))
						out[id] = fmt.Sprint(m) // fmt sorts map keys
					case "sum":
						v, ok := f.red.Get(key, ns)
						require.True(t, ok, id)
						out[id] = fmt.Sprint(v)
					case "avg":
						v, ok := f.agg.Get(key, ns)
						require.True(t, ok, id)
						acc, _ := f.agg.Accumulator(key, ns)
						out[id] = fmt.Sprint(v, acc)
					case "ttl":
						v, ok := f.ttl.Get(key, ns)
						require.True(t, ok, id)
						out[id] = fmt.Sprint(v)
					default:
						t.Fatalf("unexpected state %q", name)
					}
				}
			}
		}
	}
	for _, d := range []statestore.Domain{statestore.EventTime, statestore.ProcessingTime} {
		for tm := range f.tm.Timers(d) {
			out[fmt.Sprintf("timer/%s/%s/%s/%d", d, tm.Key, tm.Namespace, tm.Timestamp)] = ""
		}
	}
	return out
}

// snapshotBlobs snapshots b and returns its blobs by key group.
func snapshotBlobs(t testing.TB, b statestore.Backend) map[int][]byte {
	t.Helper()
	s, err := b.Snapshot()
	require.NoError(t, err)
	defer s.Release()
	groups, list, err := statestoretest.Blobs(s)
	require.NoError(t, err)
	blobs := map[int][]byte{}
	for i, g := range groups {
		blobs[g] = list[i]
	}
	return blobs
}

// inRange returns the blobs of key groups [start, end), in key-group order.
func inRange(blobs map[int][]byte, start, end int) [][]byte {
	var out [][]byte
	for _, g := range slices.Sorted(maps.Keys(blobs)) {
		if g >= start && g < end {
			out = append(out, blobs[g])
		}
	}
	return out
}

// TestSnapshotsMoveBetweenBackends: a snapshot of one backend restores into
// every other (a savepoint switches `state.backend`), registered before or
// after the restore, and the restored backend snapshots the same bytes.
func TestSnapshotsMoveBetweenBackends(t *testing.T) {
	for _, from := range backends {
		for _, to := range backends {
			t.Run(from.name+"->"+to.name, func(t *testing.T) {
				src := &opener{t: t, open: from.open, maxPar: 16, clock: &fakeClock{now: 1_000_000}}
				dst := &opener{t: t, open: to.open, maxPar: 16, clock: src.clock}
				b := src.all()
				f := registerAll(t, b)
				for i, k := range keys(300) {
					f.fill(k, i)
					f.fill(k, i*3)
				}
				want := dumpAll(t, b, f)
				require.NotEmpty(t, want)
				blobs := snapshotBlobs(t, b)
				for _, registerFirst := range []bool{true, false} {
					r := dst.all()
					var g *fixture
					if registerFirst {
						g = registerAll(t, r)
					}
					require.NoError(t, r.Restore(inRange(blobs, 0, dst.maxPar)...))
					if !registerFirst {
						require.Equal(t, blobs, snapshotBlobs(t, r), "restored, not registered")
						g = registerAll(t, r)
					}
					require.Equal(t, want, dumpAll(t, r, g))
					require.Equal(t, blobs, snapshotBlobs(t, r))
					require.NoError(t, r.Err())
				}
			})
		}
	}
}
