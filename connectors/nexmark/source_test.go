package nexmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/generator"
	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// numbered makes event n's date_time n+1 (base_time 0, one event per ms),
// so that tests can tell which events came out.
const numbered = "rate: 1000\nbase_time: 0\n"

func load(t testing.TB, body string) *Config {
	t.Helper()
	cfg, err := conntest.LoadSource(t, "nexmark", body)
	require.NoError(t, err)
	return cfg.(*Config)
}

// number returns the event number of a record of a numbered source.
func number(t testing.TB, rec map[string]any) int {
	t.Helper()
	return int(rec["date_time"].(int64)) - 1
}

// numbers returns the event numbers of the records of the batches.
func numbers(t testing.TB, batches []conntest.Batch) []int {
	t.Helper()
	var out []int
	for _, f := range conntest.Fields(batches) {
		out = append(out, number(t, f))
	}
	return out
}

// drainAll runs every subtask of parallelism p to the end and returns the
// events, each as JSON, sorted.
func drainAll(t *testing.T, cfg *Config, p int) []string {
	t.Helper()
	var all []string
	for k := range p {
		src := conntest.OpenSource(t, cfg, k, p, nil)
		for _, f := range conntest.Fields(conntest.Drain(t, src, time.Minute)) {
			b, err := json.Marshal(f)
			require.NoError(t, err)
			all = append(all, string(b))
		}
	}
	slices.Sort(all)
	return all
}

// TestDeterministicAcrossParallelism: the events of parallelism 1, 2 and
// 3 are the same multiset, and at parallelism 1 they are Event(0), ...,
// Event(count-1) in order.
func TestDeterministicAcrossParallelism(t *testing.T) {
	cfg := load(t, "count: 5000\n")
	one := drainAll(t, cfg, 1)
	require.Len(t, one, 5000)
	require.Equal(t, one, drainAll(t, cfg, 2))
	require.Equal(t, one, drainAll(t, cfg, 3))

	g := NewGenerator(cfg, DefaultBaseTime)
	fields := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), time.Minute))
	for n, f := range fields {
		require.Equal(t, g.Event(int64(n)), f, "event %d", n)
	}
}

// TestSubtaskNumbers: subtask k of p generates the numbers k, k+p, ...,
// and its last position is past the end.
func TestSubtaskNumbers(t *testing.T) {
	cfg := load(t, "count: 10\n"+numbered)
	batches := conntest.Drain(t, conntest.OpenSource(t, cfg, 1, 3, nil), time.Minute)
	require.Equal(t, []int{1, 4, 7}, numbers(t, batches))
	require.Equal(t, 1, batches[0].Split)
	require.True(t, batches[len(batches)-1].SplitDone)
	pos, err := DecodePosition(conntest.LastPosition(batches))
	require.NoError(t, err)
	require.Equal(t, Position{BaseTime: 0, Position: generator.Position{Subtask: 1, Parallelism: 3, Next: 10}}, pos)
}

// TestRestoreContinuesExactly: restored from the position after its first
// batch, a subtask generates exactly the rest of its events.
func TestRestoreContinuesExactly(t *testing.T) {
	cfg := load(t, "count: 5000\n")
	for _, p := range []int{1, 2} {
		for k := range p {
			full := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, k, p, nil), time.Minute))
			src := conntest.OpenSource(t, cfg, k, p, nil)
			first := conntest.ReadOnce(t, src, time.Minute)
			require.NoError(t, first.Err)
			require.Len(t, first.Records, maxBatch)
			rest := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, k, p, first.Position), time.Minute))
			require.Len(t, full, 5000/p)
			require.Equal(t, full, append(conntest.Fields([]conntest.Batch{first}), rest...), "p=%d k=%d", p, k)
		}
	}
}

// subtask is one open subtask of a run and the position a checkpoint
// would store for it now.
type subtask struct {
	src pipeline.Source
	pos []byte
}

// openRun opens every subtask of parallelism p as the runtime does from
// the positions of a checkpoint taken at parallelism len(prev) (none: a
// fresh start).
func openRun(t *testing.T, cfg *Config, p int, prev [][]byte) []*subtask {
	t.Helper()
	run := make([]*subtask, p)
	for k := range p {
		src, err := cfg.NewSource()
		require.NoError(t, err)
		sc := &pipeline.SourceContext{SubtaskInfo: conntest.Info("nx", k, p)}
		switch {
		case prev == nil:
		case len(prev) == p:
			sc.Restored = prev[k]
		default:
			sc.RestoredAll = prev
		}
		require.NoError(t, src.Open(context.Background(), sc))
		t.Cleanup(func() { _ = src.Close(context.Background()) })
		run[k] = &subtask{src: src, pos: sc.Restored}
		if sc.Position != nil {
			run[k].pos = sc.Position
		}
	}
	return run
}

// read reads n batches of s (fewer at the end) and returns the numbers.
func (s *subtask) read(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		b := conntest.ReadOnce(t, s.src, time.Minute)
		if b.Err != nil && !errors.Is(b.Err, io.EOF) {
			require.NoError(t, b.Err)
		}
		out = append(out, numbers(t, []conntest.Batch{b})...)
		if b.Position != nil {
			s.pos = b.Position
		}
		if errors.Is(b.Err, io.EOF) {
			break
		}
	}
	return out
}

// TestRescaleGeneratesEachEventOnce restarts a bounded source many times
// at random parallelisms, its subtasks getting ahead of each other by
// random numbers of batches; what a subtask generates after the
// checkpoint is lost, as in a crash. Over all runs every event comes out
// exactly once.
func TestRescaleGeneratesEachEventOnce(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	for round := range 10 {
		count := 1 + rng.IntN(20*maxBatch)
		cfg := load(t, fmt.Sprintf("count: %d\n%s", count, numbered))
		seen := make([]int, count)
		var prev [][]byte
		var trail []int
		for restart := range 6 {
			p := 1 + rng.IntN(5)
			trail = append(trail, p)
			run := openRun(t, cfg, p, prev)
			last := restart == 5
			prev = make([][]byte, p)
			for k, s := range run {
				n := rng.IntN(3)
				if last {
					n = count // to the end
				}
				for _, i := range s.read(t, n) {
					seen[i]++
				}
				prev[k] = s.pos
				if !last {
					s.read(t, rng.IntN(2)) // after the checkpoint: lost
				}
			}
		}
		for i, n := range seen {
			if n != 1 {
				require.Failf(t, "event generated other than once", "round %d (count %d, parallelisms %v, seed %d): event %d generated %d times", round, count, trail, seed, i, n)
			}
		}
	}
}

// TestRescaleUnbounded: restored at another parallelism, an unbounded
// source goes on from the slowest old subtask, skipping what the others
// generated.
func TestRescaleUnbounded(t *testing.T) {
	cfg := load(t, numbered)
	run := openRun(t, cfg, 2, nil)
	require.Len(t, run[0].read(t, 3), 3*maxBatch) // 0, 2, ..., 6142
	require.Len(t, run[1].read(t, 1), maxBatch)   // 1, 3, ..., 2047
	next := openRun(t, cfg, 3, [][]byte{run[0].pos, run[1].pos})
	pos, err := DecodePosition(next[0].pos)
	require.NoError(t, err)
	require.Equal(t, Position{Position: generator.Position{Subtask: 0, Parallelism: 3, Base: 2049, Next: 2049, Produced: []generator.Run{{Step: 2, Residue: 0, From: 2049, To: 6144}}}}, pos)
	got := next[1].read(t, 1)
	require.Equal(t, 2053, got[0]) // 2050 is even: generated before
	for _, n := range got {
		require.True(t, n%3 == 1 && (n%2 == 1 || n >= 6144), "event %d", n)
	}
}

// TestCountRateBaseTime: count bounds the events; rate and base_time
// place them in event time (event n at base + (n+1) × 1e6/rate µs,
// truncated to µs, then to ms), the default base time is the fixed one.
func TestCountRateBaseTime(t *testing.T) {
	times := func(cfg *Config) []int64 {
		var out []int64
		for _, f := range conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), time.Minute)) {
			out = append(out, f["date_time"].(int64))
		}
		return out
	}
	require.Equal(t, []int64{333, 666, 1000, 1333, 1666, 2000, 2333}, times(load(t, "count: 7\nrate: 3\nbase_time: 0\n")))
	require.Equal(t, []int64{-999, -998, -997}, times(load(t, "count: 3\nrate: 1000\nbase_time: -1000\n")))
	// The default, 10,000 events per second: ten events per ms.
	cfg := load(t, "count: 25\n")
	require.Equal(t, int64(10_000), int64(cfg.Rate))
	ts := times(cfg)
	require.Len(t, ts, 25)
	for n, v := range ts {
		require.Equal(t, DefaultBaseTime+int64(n+1)/10, v, "event %d", n)
	}
	// The reference's benchmark rate, 10 million per second: 10,000 per ms.
	ts = times(load(t, "count: 10001\nrate: 10000000\n"))
	require.Equal(t, DefaultBaseTime, ts[9998])
	require.Equal(t, DefaultBaseTime+1, ts[9999])
}

// TestBaseTimeNow: base_time now is the wall clock when the first subtask
// opens, the same for every subtask; a restore keeps the checkpoint's base
// time whatever the config says.
func TestBaseTimeNow(t *testing.T) {
	before := time.Now().UnixMilli()
	cfg := load(t, "base_time: now\n"+"rate: 1000\n")
	run := openRun(t, cfg, 2, nil)
	after := time.Now().UnixMilli()
	var bases []int64
	for _, s := range run {
		pos, err := DecodePosition(s.pos)
		require.NoError(t, err, "a fresh start sets its position")
		bases = append(bases, pos.BaseTime)
	}
	require.Equal(t, bases[0], bases[1])
	require.GreaterOrEqual(t, bases[0], before)
	require.LessOrEqual(t, bases[0], after)
	b := conntest.ReadOnce(t, run[1].src, time.Minute)
	require.Equal(t, bases[0]+2, b.Records[0].Fields["date_time"], "event 1")

	fixed := load(t, "base_time: 5\n"+"rate: 1000\n")
	restored := openRun(t, fixed, 2, [][]byte{run[0].pos, b.Position})
	got := conntest.ReadOnce(t, restored[1].src, time.Minute)
	require.Equal(t, bases[0]+int64(1+2*maxBatch)+1, got.Records[0].Fields["date_time"], "the checkpoint's base time")
	rescaled := openRun(t, fixed, 1, [][]byte{run[0].pos, b.Position})
	got = conntest.ReadOnce(t, rescaled[0].src, time.Minute)
	require.Equal(t, bases[0]+1, got.Records[0].Fields["date_time"], "event 0, from the checkpoint's base time")
}

// TestEventShape: over 100,000 events, each has exactly one of person,
// auction and bid, of the type event_type says (id % 50: 0 person, 1-3
// auction, 4-49 bid), with the event's date_time; ints are int64; ids
// and categories start where the reference's do; the average sizes are
// the reference's 200, 500 and 100 bytes.
func TestEventShape(t *testing.T) {
	g := NewGenerator(NewConfig(), DefaultBaseTime)
	var counts, sizes [3]int
	for n := range int64(100_000) {
		e := g.Event(n)
		require.Len(t, e, 5)
		typ := e["event_type"].(int64)
		want := map[bool]int64{true: TypeBid}[true]
		switch id := n + 2; {
		case id%50 == 0:
			want = TypePerson
		case id%50 <= 3:
			want = TypeAuction
		}
		require.Equal(t, want, typ, "event %d", n)
		counts[typ]++
		var body map[string]any
		for i, k := range []string{"person", "auction", "bid"} {
			if int64(i) == typ {
				body = e[k].(map[string]any)
			} else {
				require.Nil(t, e[k], "event %d: %s", n, k)
			}
		}
		require.Equal(t, e["date_time"], body["date_time"])
		size := 0
		for k, v := range body {
			switch x := v.(type) {
			case int64:
				size += 8
			case string:
				size += len(x)
			default:
				require.Failf(t, "a field is neither int64 nor string", "event %d: %s is %T", n, k, v)
			}
		}
		switch typ {
		case TypePerson:
			require.GreaterOrEqual(t, body["id"], int64(firstPersonID))
			size -= 8 // the reference counts the time only once
		case TypeAuction:
			require.GreaterOrEqual(t, body["id"], int64(firstAuctionID))
			require.GreaterOrEqual(t, body["category"], int64(firstCategoryID))
			require.Less(t, body["category"], int64(firstCategoryID+numCategories))
			require.Greater(t, body["expires"], body["date_time"])
			require.GreaterOrEqual(t, body["reserve"], body["initial_bid"])
		case TypeBid:
			require.GreaterOrEqual(t, body["auction"], int64(firstAuctionID))
			require.GreaterOrEqual(t, body["bidder"], int64(2*firstPersonID))
			size -= len(body["channel"].(string)) + len(body["url"].(string)) // not counted by the reference
		}
		sizes[typ] += size
	}
	require.Equal(t, [3]int{2000, 6000, 92000}, counts)
	for typ, avg := range []int{avgPersonByteSize, avgAuctionByteSize, avgBidByteSize} {
		got := float64(sizes[typ]) / float64(counts[typ])
		require.InDelta(t, avg, got, float64(avg)/50, "type %d: average size %.1f", typ, got)
	}
}

// TestEmitRate: a paced source returns what is due: one event at the
// start, then nothing until the next is due (here in 1000 s), honouring
// its context.
func TestEmitRate(t *testing.T) {
	cfg := load(t, "emit_rate: 0.001\n")
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	b := conntest.ReadOnce(t, src, time.Minute)
	require.NoError(t, b.Err)
	require.Len(t, b.Records, 1)
	b = conntest.ReadOnce(t, src, 20*time.Millisecond)
	require.ErrorIs(t, b.Err, context.DeadlineExceeded)
	require.Empty(t, b.Records)

	// 400 events/s over 2 subtasks: a subtask's 20 events take ~50ms, in
	// small batches.
	cfg = load(t, "count: 40\nemit_rate: 400\n")
	start := time.Now()
	batches := conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 2, nil), time.Minute)
	require.Len(t, conntest.Fields(batches), 20)
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "19 intervals of 5ms")
	require.Greater(t, len(batches), 5, "a paced source returns small batches")
}

// TestProgress: with count, a subtask reports the events it passed of all
// it has; a restored one starts at its position; without count the total
// is unknown.
func TestProgress(t *testing.T) {
	progress := func(src pipeline.Source) [2]int64 {
		p, ok := src.(pipeline.Progresser)
		require.True(t, ok)
		done, total := p.Progress()
		return [2]int64{done, total}
	}
	cfg := load(t, "count: 2500\n")
	src, err := cfg.NewSource()
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, progress(src), "before Open")
	src = conntest.OpenSource(t, cfg, 1, 2, nil)
	require.Equal(t, [2]int64{0, 1250}, progress(src))
	first := conntest.ReadOnce(t, src, time.Minute)
	require.Equal(t, [2]int64{maxBatch, 1250}, progress(src))
	conntest.Drain(t, src, time.Minute)
	require.Equal(t, [2]int64{1250, 1250}, progress(src))
	require.Equal(t, [2]int64{maxBatch, 1250}, progress(conntest.OpenSource(t, cfg, 1, 2, first.Position)))

	unbounded := conntest.OpenSource(t, load(t, ""), 0, 1, nil)
	conntest.ReadOnce(t, unbounded, time.Minute)
	require.Equal(t, int64(0), progress(unbounded)[1])
}

// TestLoad: the keys load with their defaults; bad values are reported
// at their FILE:LINE:COL.
func TestLoad(t *testing.T) {
	cfg := load(t, "")
	require.False(t, cfg.Bounded())
	require.True(t, cfg.Rescalable())
	require.Equal(t, pipeline.ExactlyOnce, cfg.Guarantee())
	require.Equal(t, BaseTime{Millis: DefaultBaseTime}, cfg.BaseTime)
	require.Equal(t, [6]int{1, 3, 46, 2, 4, 4}, [6]int{cfg.PersonProportion, cfg.AuctionProportion, cfg.BidProportion, cfg.HotAuctionRatio, cfg.HotSellersRatio, cfg.HotBiddersRatio})

	cfg = load(t, "count: 5\nrate: 2.5\nbase_time: now\nemit_rate: 10\nperson_proportion: 2\nauction_proportion: 1\nbid_proportion: 0\nhot_auction_ratio: 1\nhot_sellers_ratio: 9\nhot_bidders_ratio: 3\n")
	require.True(t, cfg.Bounded())
	require.Equal(t, BaseTime{Now: true}, cfg.BaseTime)
	require.Equal(t, [6]int{2, 1, 0, 1, 9, 3}, [6]int{cfg.PersonProportion, cfg.AuctionProportion, cfg.BidProportion, cfg.HotAuctionRatio, cfg.HotSellersRatio, cfg.HotBiddersRatio})

	for _, tc := range []struct{ body, want string }{
		{"count: -1", "t.yaml:6:12: count: must be 0 (unbounded) or more, not -1"},
		{"rate: 0", "t.yaml:6:11: rate: must be a positive number of events per second of event time"},
		{"rate: .nan", "t.yaml:6:11: rate: must be a positive number"},
		{"emit_rate: -2", "t.yaml:6:16: emit_rate: must be 0 (as fast as possible) or a positive number"},
		{"base_time: yesterday", `t.yaml:6:16: `},
		{"base_time: yesterday", `must be epoch milliseconds (an integer) or now, not "yesterday"`},
		{"person_proportion: 0", "t.yaml:6:24: person_proportion: must be an integer from 1 to 2147483647, not 0"},
		{"bid_proportion: -1", "t.yaml:6:21: bid_proportion: must be an integer from 0 to 2147483647, not -1"},
		{"hot_bidders_ratio: 0", "t.yaml:6:24: hot_bidders_ratio: must be an integer from 1"},
		{"cuont: 3", `unknown key "cuont"`},
	} {
		_, err := conntest.LoadSource(t, "nexmark", tc.body)
		require.ErrorIs(t, err, pipeline.ErrInvalid, tc.body)
		require.ErrorContains(t, err, tc.want, tc.body)
	}
}

// TestPositions: positions round-trip and describe themselves; corrupt
// ones, and ones that do not belong together, are refused.
func TestPositions(t *testing.T) {
	p := Position{BaseTime: -7, Position: generator.Position{Subtask: 1, Parallelism: 3, Base: 1 << 40, Next: 1<<40 + 1, Produced: []generator.Run{{Step: 2, Residue: 1, From: 1 << 40, To: 1<<40 + 9}}}}
	got, err := DecodePosition(EncodePosition(p))
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Equal(t, EncodePosition(p), withNext(positionPrefix(p), p.Next))
	described, err := NewConfig().DescribePosition(EncodePosition(p))
	require.NoError(t, err)
	b, err := json.Marshal(described)
	require.NoError(t, err)
	require.JSONEq(t, `{"base_time":-7,"subtask":1,"parallelism":3,"base":1099511627776,"next":1099511627777,"produced":[{"step":2,"residue":1,"from":1099511627776,"to":1099511627785}]}`, string(b))

	good := EncodePosition(p)
	for name, b := range map[string][]byte{
		"empty":           {},
		"another magic":   append([]byte{0xff}, good[1:]...),
		"unknown version": append([]byte{positionMagic, 9}, good[2:]...),
		"truncated":       good[:len(good)-1],
		"no base time":    {positionMagic, positionVersion},
		"trailing bytes":  append(append([]byte(nil), good...), 0),
	} {
		_, err := DecodePosition(b)
		require.Error(t, err, name)
	}

	a := EncodePosition(Position{BaseTime: 1, Position: generator.Position{Subtask: 0, Parallelism: 2, Next: 4}})
	c := EncodePosition(Position{BaseTime: 1, Position: generator.Position{Subtask: 1, Parallelism: 2, Next: 5}})
	otherBase := EncodePosition(Position{BaseTime: 2, Position: generator.Position{Subtask: 1, Parallelism: 2, Next: 5}})
	for name, all := range map[string][][]byte{
		"subtasks swapped":        {c, a},
		"another run's base time": {a, otherBase},
		"too few":                 {a},
	} {
		_, _, err := rescale(all, 0, 3)
		require.ErrorContains(t, err, "does not belong", name)
	}
	q, ok, err := rescale([][]byte{nil, c}, 1, 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Position{BaseTime: 1, Position: generator.Position{Subtask: 1, Parallelism: 3, Next: 1, Produced: []generator.Run{{Step: 2, Residue: 1, To: 5}}}}, q)
	late := EncodePosition(Position{BaseTime: 1, Position: generator.Position{Subtask: 1, Parallelism: 2, Base: 10, Next: 15}})
	q, _, err = rescale([][]byte{nil, late}, 0, 1)
	require.NoError(t, err)
	require.Equal(t, Position{BaseTime: 1, Position: generator.Position{Subtask: 0, Parallelism: 1, Base: 10, Next: 10, Produced: []generator.Run{{Step: 2, Residue: 1, From: 10, To: 15}}}}, q,
		"a subtask without a position is at its first number above the base")
	_, ok, err = rescale([][]byte{nil, nil}, 0, 3)
	require.NoError(t, err)
	require.False(t, ok, "nothing generated: a fresh start")

	src, err := NewConfig().NewSource()
	require.NoError(t, err)
	err = src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("nx", 0, 2), Restored: c})
	require.ErrorContains(t, err, `nexmark source "nx": restore: the position of subtask 1 of 2 is not subtask 0 of 2's`)
}

// BenchmarkNexmarkSource measures the source alone: events per second of
// one subtask and allocations per event.
func BenchmarkNexmarkSource(b *testing.B) {
	src := conntest.OpenSource(b, load(b, ""), 0, 1, nil)
	var batch pipeline.ReadBatch
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		batch.Records = batch.Records[:0]
		if err := src.Read(context.Background(), &batch); err != nil {
			b.Fatal(err)
		}
		events += len(batch.Records)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}
