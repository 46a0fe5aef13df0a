package statestore_test

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/statestore"
)

// Benchmarks run against every backend. Keys are pre-built canonical
// strings, as operators get them from the runtime; the key-group function is
// xxhash mod 128, as pipeline.KeyGroup.
//
//	go test -run XXX -bench . -benchmem ./statestore/

const benchMaxPar = 128

func benchBackend(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) statestore.Backend {
	be := open(b, statestore.Options{
		KeyGroup:  func(k string) int { return keyGroupOf(k, benchMaxPar) },
		KeyGroups: [2]int{0, benchMaxPar},
	})
	b.Cleanup(func() { _ = be.Close() })
	return be
}

func forEachBackendB(b *testing.B, fn func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend)) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) { fn(b, bk.open) })
	}
}

func reportRate(b *testing.B, what string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), what+"/s")
}

// BenchmarkValueStateUpdate10kKeys: a read-modify-write (Get + Put) of a
// counter, round-robin over 10,000 keys.
func BenchmarkValueStateUpdate10kKeys(b *testing.B) {
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		for _, ttl := range []time.Duration{0, time.Hour} {
			b.Run("ttl="+ttl.String(), func(b *testing.B) {
				be := benchBackend(b, open)
				s, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int64]{Name: "count", TTL: ttl})
				require.NoError(b, err)
				ks := keys(10_000)
				for _, k := range ks {
					s.Put(k, "", 0)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k := ks[i%len(ks)]
					v, _ := s.Get(k, "")
					s.Put(k, "", v+1)
				}
				reportRate(b, "updates")
			})
		}
	})
}

// windowAcc is the accumulator of a window computing count, avg and max.
type windowAcc struct {
	N   int64
	Sum float64
	Max float64
}

func windowDescriptor() statestore.AggregatingDescriptor[float64, windowAcc, windowAcc] {
	return statestore.AggregatingDescriptor[float64, windowAcc, windowAcc]{
		Name: "agg",
		Add: func(a windowAcc, v float64) windowAcc {
			if a.N == 0 || v > a.Max {
				a.Max = v
			}
			a.N++
			a.Sum += v
			return a
		},
		Merge: func(a, b windowAcc) windowAcc {
			a.N += b.N
			a.Sum += b.Sum
			a.Max = max(a.Max, b.Max)
			return a
		},
		Result: func(a windowAcc) windowAcc { return a },
	}
}

// windowNamespaces returns n encoded window namespaces, as an operator
// would cache them.
func windowNamespaces(n int) []string {
	ns := make([]string, n)
	for i := range ns {
		ns[i] = "[" + strconv.Itoa(i*10_000) + "," + strconv.Itoa((i+1)*10_000) + ")"
	}
	return ns
}

// BenchmarkAggregatingState: a keyed tumbling window's hot path, one Add per
// record into the (key, window) accumulator, 10,000 keys, 2 windows open per
// key ("sliding" has 6 windows per record, one Add each).
func BenchmarkAggregatingState(b *testing.B) {
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		b.Run("tumbling", func(b *testing.B) {
			be := benchBackend(b, open)
			s, err := statestore.RegisterAggregating(be, windowDescriptor())
			require.NoError(b, err)
			ks, ns := keys(10_000), windowNamespaces(2)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s.Add(ks[i%len(ks)], ns[(i/len(ks))%2], float64(i&1023))
			}
			reportRate(b, "updates")
		})
		b.Run("sliding", func(b *testing.B) {
			be := benchBackend(b, open)
			s, err := statestore.RegisterAggregating(be, windowDescriptor())
			require.NoError(b, err)
			ks, ns := keys(10_000), windowNamespaces(12)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				first := (i / len(ks)) % 6
				for w := first; w < first+6; w++ {
					s.Add(ks[i%len(ks)], ns[w], float64(i&1023))
				}
			}
			reportRate(b, "records")
		})
		b.Run("merge-sessions", func(b *testing.B) {
			be := benchBackend(b, open)
			s, err := statestore.RegisterAggregating(be, windowDescriptor())
			require.NoError(b, err)
			ks, ns := keys(10_000), windowNamespaces(3)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := ks[i%len(ks)]
				s.Add(k, ns[1], 1)
				s.Add(k, ns[2], 2)
				s.MergeNamespaces(k, ns[0], ns[1], ns[2])
			}
		})
	})
}

// BenchmarkTimers: one window timer registered per op over 10,000 keys and
// 10 distinct timestamps (so 9 of 10 registrations are duplicates of a
// pending timer after the first pass), fired every 10,000 ops by a watermark.
func BenchmarkTimers(b *testing.B) {
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		b.Run("register-fire", func(b *testing.B) {
			tm := benchBackend(b, open).TimerService("window")
			ks, ns := keys(10_000), windowNamespaces(1)
			fire := func(statestore.Timer) error { return nil }
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				round := int64(i / len(ks))
				tm.RegisterEventTimer(ks[i%len(ks)], ns[0], round*1000+int64(i%10))
				if i%len(ks) == len(ks)-1 {
					_ = tm.AdvanceWatermark(round*1000+999, fire)
				}
			}
			reportRate(b, "timers")
		})
		b.Run("register-delete", func(b *testing.B) {
			tm := benchBackend(b, open).TimerService("window")
			ks := keys(10_000)
			for i, k := range ks {
				tm.RegisterEventTimer(k, "", int64(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := ks[i%len(ks)]
				tm.DeleteEventTimer(k, "", int64(i%len(ks)))
				tm.RegisterEventTimer(k, "", int64(i%len(ks)))
			}
		})
	})
}

// BenchmarkSnapshot: 10,000 keys, each with a value, an aggregate in 2
// windows and an event timer.
//
//   - capture: the synchronous part, Snapshot() on the task goroutine.
//   - encode: the asynchronous part, all blobs (B/snapshot is their size).
//   - first-writes-after: the copy-on-write cost paid by the task: one
//     update per key right after a snapshot (compare with steady-writes).
//   - restore: Restore of all blobs into an empty backend with states registered.
func BenchmarkSnapshot(b *testing.B) {
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		setup := func(b *testing.B) (statestore.Backend, statestore.ValueState[int64], statestore.AggregatingState[float64, windowAcc, windowAcc], []string) {
			be := benchBackend(b, open)
			v, err := statestore.RegisterValue(be, statestore.ValueDescriptor[int64]{Name: "count"})
			require.NoError(b, err)
			a, err := statestore.RegisterAggregating(be, windowDescriptor())
			require.NoError(b, err)
			tm := be.TimerService("window")
			ks, ns := keys(10_000), windowNamespaces(2)
			for i, k := range ks {
				v.Put(k, "", int64(i))
				a.Add(k, ns[0], float64(i))
				a.Add(k, ns[1], float64(i))
				tm.RegisterEventTimer(k, ns[0], 9_999)
			}
			return be, v, a, ks
		}
		b.Run("capture", func(b *testing.B) {
			be, _, _, _ := setup(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s, err := be.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				s.Release()
			}
		})
		b.Run("encode", func(b *testing.B) {
			be, _, _, _ := setup(b)
			s, err := be.Snapshot()
			require.NoError(b, err)
			var buf bytes.Buffer
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf.Reset()
				if _, err := s.WriteTo(&buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "B/snapshot")
		})
		b.Run("first-writes-after", func(b *testing.B) {
			be, v, _, ks := setup(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%len(ks) == 0 {
					if _, err := be.Snapshot(); err != nil {
						b.Fatal(err)
					}
				}
				v.Put(ks[i%len(ks)], "", int64(i))
			}
		})
		b.Run("steady-writes", func(b *testing.B) {
			_, v, _, ks := setup(b)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				v.Put(ks[i%len(ks)], "", int64(i))
			}
		})
		b.Run("restore", func(b *testing.B) {
			be, _, _, _ := setup(b)
			blobs := snapshotBlobs(b, be)
			all := inRange(blobs, 0, benchMaxPar)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := benchBackend(b, open)
				if _, err := statestore.RegisterValue(r, statestore.ValueDescriptor[int64]{Name: "count"}); err != nil {
					b.Fatal(err)
				}
				if _, err := statestore.RegisterAggregating(r, windowDescriptor()); err != nil {
					b.Fatal(err)
				}
				if err := r.Restore(all...); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// BenchmarkKeyedUpdateBackends compares the backends on a keyed update, a
// read-modify-write (Get + Put) of a per-key counter, with keys drawn from:
//
//   - uniform-10k: 10,000 keys, round-robin: the working set fits bbolt's
//     default cache (DefaultCacheEntries), so bbolt serves it from memory;
//   - zipf-200k: 200,000 keys, Zipf-distributed (s = 1.1): a skewed working
//     set 20 times the cache, the hot keys cached;
//   - uniform-200k: 200,000 keys, uniformly random: nearly every access
//     loads its key from the file, and every 5,000 loads flush the cache.
//
// memory/W against bbolt/W is the cost of live state on disk; bbolt-evicting
// (a 32-key cache) is the worst case. The state is filled once per backend
// and workload, outside the timed loop.
//
//	go test -run XXX -bench KeyedUpdateBackends ./statestore/
func BenchmarkKeyedUpdateBackends(b *testing.B) {
	type workload struct {
		name string
		keys int
		next func(r *rand.Rand) func() int // a key index generator
	}
	workloads := []workload{
		{"uniform-10k", 10_000, func(*rand.Rand) func() int {
			i := -1
			return func() int { i = (i + 1) % 10_000; return i }
		}},
		{"zipf-200k", 200_000, func(r *rand.Rand) func() int {
			z := rand.NewZipf(r, 1.1, 1, 200_000-1)
			return func() int { return int(z.Uint64()) }
		}},
		{"uniform-200k", 200_000, func(r *rand.Rand) func() int {
			return func() int { return r.IntN(200_000) }
		}},
	}
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		for _, w := range workloads {
			// The same key sequence for every backend.
			next := w.next(rand.New(rand.NewPCG(7, 11)))
			seq := make([]int32, 1<<20)
			for i := range seq {
				seq[i] = int32(next())
			}
			ks := keys(w.keys)
			var s statestore.ValueState[int64]
			outer := b
			b.Run(w.name, func(b *testing.B) {
				if s == nil { // filled once, for every round of b.N
					var err error
					s, err = statestore.RegisterValue(benchBackend(outer, open), statestore.ValueDescriptor[int64]{Name: "count"})
					require.NoError(b, err)
					for _, k := range ks {
						s.Put(k, "", 0)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k := ks[seq[i&(len(seq)-1)]]
					v, _ := s.Get(k, "")
					s.Put(k, "", v+1)
				}
				reportRate(b, "updates")
			})
		}
	})
}

// BenchmarkMapState: a read-modify-write (Get + Put) of one of 4 map
// entries per key, round-robin over 10,000 keys, without and with a TTL
// (whose entries expire one by one); "iterate" ranges over a key's map.
func BenchmarkMapState(b *testing.B) {
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		for _, ttl := range []time.Duration{0, time.Hour} {
			b.Run("ttl="+ttl.String(), func(b *testing.B) {
				be := benchBackend(b, open)
				s, err := statestore.RegisterMap(be, statestore.MapDescriptor[int, int64]{Name: "m", TTL: ttl})
				require.NoError(b, err)
				ks := keys(10_000)
				for _, k := range ks {
					for e := range 4 {
						s.Put(k, "", e, 0)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					k, e := ks[i%len(ks)], (i/len(ks))&3
					v, _ := s.Get(k, "", e)
					s.Put(k, "", e, v+1)
				}
				reportRate(b, "updates")
			})
		}
		b.Run("iterate", func(b *testing.B) {
			be := benchBackend(b, open)
			s, err := statestore.RegisterMap(be, statestore.MapDescriptor[int, int64]{Name: "m"})
			require.NoError(b, err)
			ks := keys(10_000)
			for _, k := range ks {
				for e := range 4 {
					s.Put(k, "", e, int64(e))
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			var sum int64
			for i := 0; i < b.N; i++ {
				for _, v := range s.Iterate(ks[i%len(ks)], "") {
					sum += v
				}
			}
			if sum == 0 {
				b.Fatal("iterated nothing")
			}
		})
	})
}

// BenchmarkListState: a count window's buffer, round-robin over 10,000
// keys: each op reads the key's list and appends to it, or clears it once
// it holds 16 elements.
func BenchmarkListState(b *testing.B) {
	forEachBackendB(b, func(b *testing.B, open func(testing.TB, statestore.Options) statestore.Backend) {
		be := benchBackend(b, open)
		s, err := statestore.RegisterList(be, statestore.ListDescriptor[int64]{Name: "buf"})
		require.NoError(b, err)
		ks := keys(10_000)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			k := ks[i%len(ks)]
			if len(s.Get(k, "")) >= 16 {
				s.Clear(k, "")
				continue
			}
			s.Add(k, "", int64(i))
		}
		reportRate(b, "records")
	})
}
