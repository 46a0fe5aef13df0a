package operators

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// ivRec is a record of a random interval join input: its side, key, time
// and id (the field "id", which the join's select reads).
type ivRec struct {
	id, side int
	key      string
	ts       int64
}

// ivStep is one step of an arrival sequence: a record, a watermark
// (isWM) or a restart from a snapshot.
type ivStep struct {
	rec     ivRec
	isWM    bool
	wm      int64
	restart bool
}

// ivCase is a random interval join: its bounds (inclusive, in ms), its
// lateness and the arrival sequence of its records and watermarks.
type ivCase struct {
	typ                    string
	lower, upper, lateness int64
	lowerEx, upperEx       bool
	steps                  []ivStep
}

// yaml returns the case's join step.
func (c *ivCase) yaml() string {
	lo, hi := c.lower, c.upper
	if c.lowerEx {
		lo--
	}
	if c.upperEx {
		hi++
	}
	return fmt.Sprintf("join:\n  left: in\n  right: in\n  on: {left: k, right: k}\n  type: %s\n"+
		"  between: {lower: %dms, upper: %dms, lower_exclusive: %t, upper_exclusive: %t}\n"+
		"  select: {l: left.id, r: right.id}\nallowed_lateness: %dms\nlate_output: late\n",
		c.typ, lo, hi, c.lowerEx, c.upperEx, c.lateness)
}

// randomIvCase draws a case of type typ. Records come in time order but
// for a random disorder; a watermark never makes a record that follows it
// late unless withLate.
func randomIvCase(rng *rand.Rand, typ string, withLate bool) *ivCase {
	c := &ivCase{typ: typ, lower: rng.Int64N(51) - 30, lateness: []int64{0, 0, 3, 20}[rng.IntN(4)]}
	c.upper = c.lower + rng.Int64N(31)
	if c.upper > c.lower {
		c.lowerEx, c.upperEx = rng.IntN(3) == 0, rng.IntN(3) == 0
		if c.lowerEx && c.upperEx && c.upper == c.lower+1 {
			c.upperEx = false
		}
	}
	n := 1 + rng.IntN(40)
	disorder := []int64{0, 5, 30, 200}[rng.IntN(4)]
	recs := make([]ivRec, n)
	order := make([]int64, n)
	for i := range recs {
		recs[i] = ivRec{id: i, side: rng.IntN(2), key: []string{"a", "b", "c"}[rng.IntN(3)], ts: rng.Int64N(100)}
		order[i] = recs[i].ts + rng.Int64N(disorder+1)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return int(order[a] - order[b]) })
	wm := int64(-50)
	for i, ri := range idx {
		if rng.IntN(4) == 0 {
			limit := int64(150) // anything, when late records are allowed
			if !withLate {
				// Below every record to come, less the lateness: none is late.
				limit = int64(1 << 20)
				for _, rj := range idx[i:] {
					limit = min(limit, recs[rj].ts+c.lateness-1)
				}
			}
			if limit > wm {
				wm += 1 + rng.Int64N(limit-wm)
				c.steps = append(c.steps, ivStep{isWM: true, wm: wm})
			}
		}
		// A restore starts the watermark over (records behind the one
		// before it are not late until the next): no restarts with late
		// records, whose reference could not tell which join.
		if !withLate && rng.IntN(12) == 0 {
			c.steps = append(c.steps, ivStep{restart: true})
		}
		c.steps = append(c.steps, ivStep{rec: recs[ri]})
	}
	return c
}

// closeAt is when the reference says a record can join nothing more.
func (c *ivCase) closeAt(r ivRec) int64 {
	if r.side == sideLeft {
		return r.ts + c.upper + c.lateness
	}
	return r.ts - c.lower + c.lateness
}

// ivRow is the text of a result: the ids of its left and right records
// (<nil> for the missing side of a padded row) and its time.
func ivRow(l, r any, t int64) string { return fmt.Sprintf("l=%v r=%v t=%d", l, r, t) }

// reference joins the records that are not late with nested loops.
func (c *ivCase) reference(accepted []ivRec) []string {
	var rows []string
	for _, l := range accepted {
		for _, r := range accepted {
			if c.joins(l, r) {
				rows = append(rows, ivRow(l.id, r.id, max(l.ts, r.ts)))
			}
		}
	}
	for _, x := range c.unmatched(accepted) {
		rows = append(rows, x.paddedRow())
	}
	slices.Sort(rows)
	return rows
}

// joins tells whether the reference joins l and r.
func (c *ivCase) joins(l, r ivRec) bool {
	return l.side == sideLeft && r.side == sideRight && l.key == r.key && r.ts >= l.ts+c.lower && r.ts <= l.ts+c.upper
}

// unmatched returns the records that join no other and that the join
// type emits alone.
func (c *ivCase) unmatched(accepted []ivRec) []ivRec {
	typ := joinTypes[c.typ]
	var out []ivRec
	for _, x := range accepted {
		if !typ.keepsUnmatched(x.side) || slices.ContainsFunc(accepted, func(y ivRec) bool { return c.joins(x, y) || c.joins(y, x) }) {
			continue
		}
		out = append(out, x)
	}
	return out
}

// paddedRow is the row of x alone.
func (x ivRec) paddedRow() string {
	if x.side == sideLeft {
		return ivRow(x.id, nil, x.ts)
	}
	return ivRow(nil, x.id, x.ts)
}

// run feeds the steps to a new operator on backend bk in random batches
// of one side, then ends the input. It returns the sorted results, the
// records the operator accepted (not late) and the ids of the late ones.
// It checks that a padded row comes when its record's bound closes: never
// before, nor after the watermark that closes it (a record that joins
// nothing by then joins nothing later); and that the state is empty at
// the end.
func (c *ivCase) run(t *testing.T, rng *rand.Rand, bk int, steps []ivStep) (rows []string, accepted []ivRec, late []int) {
	s := newScenario(t, "random case", c.yaml(), scenarioBackends[bk].open)
	byID := map[int]ivRec{}
	wm := pipeline.MinWatermark // the operator's
	collect := func() {
		for _, r := range s.out.records {
			l, rt := r.Fields["l"], r.Fields["r"]
			row := ivRow(l, rt, r.Time)
			if l == nil || rt == nil {
				x := byID[int(cmp.Or(l, rt).(int64))]
				require.LessOrEqual(t, c.closeAt(x), wm, "padded row %s before its bound closed", row)
			}
			rows = append(rows, row)
		}
		s.out.records = nil
	}
	var batch []pipeline.Record
	side := 0
	flush := func() {
		if len(batch) > 0 {
			b := batch
			batch = nil
			s.call(func() error { return s.op.(pipeline.MultiInputOperator).ProcessInput(side, b, s.out) })
			collect()
		}
	}
	for _, st := range steps {
		switch {
		case st.isWM:
			flush()
			wm = max(wm, st.wm)
			s.call(func() error { return s.op.(pipeline.WatermarkHandler).OnWatermark(st.wm, s.out) })
			collect()
			for _, x := range c.unmatched(accepted) {
				if c.closeAt(x) <= wm {
					require.Contains(t, rows, x.paddedRow(), "watermark %d closed the record", wm)
				}
			}
		case st.restart:
			flush()
			s.restart()
			wm = pipeline.MinWatermark
		default:
			r := st.rec
			if r.side != side || rng.IntN(3) == 0 {
				flush()
			}
			side = r.side
			byID[r.id] = r
			if r.ts+c.lateness <= wm {
				late = append(late, r.id)
			} else {
				accepted = append(accepted, r)
			}
			key, err := pipeline.EncodeKey(nil, r.key)
			require.NoError(t, err)
			batch = append(batch, pipeline.Record{Fields: map[string]any{"k": r.key, "id": int64(r.id)}, Time: r.ts, Key: string(key)})
		}
	}
	flush()
	wm = pipeline.MaxWatermark
	s.call(func() error { return s.op.(pipeline.WatermarkHandler).OnWatermark(pipeline.MaxWatermark, s.out) })
	s.call(func() error { return s.op.(pipeline.Finisher).Finish(s.out) })
	collect()
	require.Zero(t, s.stateEntries(), "state entries and timers after the final watermark")
	var gotLate []int
	for _, r := range s.late.records {
		gotLate = append(gotLate, int(r.Fields["id"].(int64)))
		require.Equal(t, sideNames[byID[int(r.Fields["id"].(int64))].side], r.Fields[fieldSide])
	}
	s.late.records = nil
	slices.Sort(gotLate)
	slices.Sort(late)
	require.Equal(t, late, gotLate, "late records")
	slices.Sort(rows)
	return rows, accepted, late
}

// ivShuffled returns steps with the records between two watermarks (or
// restarts) in a random order.
func ivShuffled(rng *rand.Rand, steps []ivStep) []ivStep {
	out := slices.Clone(steps)
	start := 0
	for i := 0; i <= len(out); i++ {
		if i == len(out) || out[i].isWM || out[i].restart {
			seg := out[start:i]
			rng.Shuffle(len(seg), func(a, b int) { seg[a], seg[b] = seg[b], seg[a] })
			start = i + 1
		}
	}
	return out
}

// The interval join's results are those of a nested-loop join over the
// records that were not late, for every join type, random bounds
// (inclusive or exclusive), lateness, keys, times, watermarks, batches and
// restarts, on every state backend; and they stay the same when the
// records between two watermarks arrive in another order. Padded rows
// never come before their bound closes, the state is empty at the end.
func TestIntervalJoinMatchesNestedLoops(t *testing.T) {
	for _, withLate := range []bool{false, true} {
		for _, typ := range []string{"inner", "left", "right", "full"} {
			t.Run(fmt.Sprintf("%s/late=%t", typ, withLate), func(t *testing.T) {
				for i := range 100 {
					seed := uint64(i)
					rng := rand.New(rand.NewPCG(seed, 7))
					c := randomIvCase(rng, typ, withLate)
					bk := 0 // memory; one case in ten on each bbolt backend
					if i%10 == 9 {
						bk = 1 + i/10%2
					}
					rows, accepted, late := c.run(t, rng, bk, c.steps)
					require.Equal(t, c.reference(accepted), rows, "seed %d: %s", seed, c.yaml())
					if !withLate {
						require.Empty(t, late, "seed %d", seed)
					}
					for range 2 {
						again, acceptedAgain, _ := c.run(t, rng, bk, ivShuffled(rng, c.steps))
						if !withLate {
							require.Equal(t, rows, again, "seed %d: another arrival order", seed)
						}
						require.Equal(t, c.reference(acceptedAgain), again, "seed %d: another arrival order", seed)
					}
				}
			})
		}
	}
}

// Invalid bounds are reported at the key that holds them.
func TestIntervalJoinBoundsValidation(t *testing.T) {
	on := "      on: {left: a, right: b}\n"
	for _, tc := range []struct{ name, between, want string }{
		{"no lower", "{upper: 1s}", `t.yaml:12:16: join.between: give the lower bound, e.g. between: {lower: -5s, upper: 10s}`},
		{"no bounds", "{}", "t.yaml:12:16: join.between: give the lower bound, e.g. between: {lower: -5s, upper: 10s}\n" +
			"t.yaml:12:16: join.between: give the upper bound, e.g. between: {lower: -5s, upper: 10s}"},
		{"bad lower", "{lower: 5x, upper: 1s}", `t.yaml:12:24: join.between.lower: "5x" is not a duration (examples: 200ms, 10s, 5m, 1h, 2d)`},
		{"fraction", "{lower: 0s, upper: 1.5ms}", `t.yaml:12:35: join.between.upper: "1.5ms" is not a whole number of milliseconds`},
		{"empty", "{lower: 1s, upper: 1s, lower_exclusive: true}", `t.yaml:12:16: join.between: the interval [1s, 1s] is empty: lower must not pass upper`},
		{"negative empty", "{lower: -1s, upper: -2s}", `t.yaml:12:16: join.between: the interval [-1s, -2s] is empty: lower must not pass upper`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadSteps(joinYAML(on+"      between: "+tc.between+"\n", ""))
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
}

// BenchmarkIntervalJoin drives the interval join operator (bounds -5s,
// +10s) directly on a memory backend: batches of 1024 records, left and
// right in turn, 10,000 keys drawn at random, times ascending but for up
// to 500 ms of disorder, and a watermark after every batch 1s behind the
// latest time. Each side's records of a key are 15s apart on average, so
// that a left record joins one right record on average. It reports
// events/s (input records) and the peak state entries: buffers (one per
// key and side that holds records) plus their timers. select reads three
// fields per result (plain field reads, which skip the expression VM);
// computed evaluates three expressions on the VM, one reading both sides;
// merge has no select (a result is the merge of the two records' fields).
func BenchmarkIntervalJoin(b *testing.B) {
	b.Run("select", func(b *testing.B) { benchIntervalJoin(b, "\n      select: {id: left.id, lv: left.v, rv: right.v}") })
	b.Run("computed", func(b *testing.B) {
		benchIntervalJoin(b, "\n      select: {id: string(left.id), lv: left.v + 1, d: right.v - left.v}")
	})
	b.Run("merge", func(b *testing.B) { benchIntervalJoin(b, "") })
}

func benchIntervalJoin(b *testing.B, sel string) {
	const keys = 10000
	backend, err := statestore.NewMemory(statestore.Options{
		KeyGroup: func(key string) int { return pipeline.KeyGroup(key, 128) }, KeyGroups: [2]int{0, 128},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	op := openWindowOn(b, "join:\n      left: in\n      right: in\n      on: {left: id, right: id}\n"+
		"      between: {lower: -5s, upper: 10s}"+sel, backend)
	b.Cleanup(func() { _ = op.Close() })
	join, wmh := op.(pipeline.MultiInputOperator), op.(pipeline.WatermarkHandler)
	// One record per key and side, reused: the join keeps their fields
	// but never changes them.
	var pristine [2][]pipeline.Record
	for side := range pristine {
		pristine[side] = make([]pipeline.Record, keys)
		for i := range keys {
			id := fmt.Sprintf("user-%d", i)
			key, _ := pipeline.EncodeKey(nil, id)
			pristine[side][i] = pipeline.Record{Fields: map[string]any{"id": id, "v": float64(i % 100)}, Key: string(key)}
		}
	}
	timers := backend.TimerService("s")
	rng := rand.New(rand.NewPCG(1, 2))
	batch := make([]pipeline.Record, benchBatch)
	var outputs int
	count := pipeline.EmitterFunc(func(rs []pipeline.Record) error { outputs += len(rs); return nil })
	// A side's record n has the time n * 1.5 ms: 10,000 keys' records
	// every 15s.
	var n [2]int64
	peak := 0
	b.ReportAllocs()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		side := i % 2
		for k := range batch {
			batch[k] = pristine[side][rng.IntN(keys)]
			batch[k].Time = n[side]*3/2 + rng.Int64N(501)
			n[side]++
		}
		if err := join.ProcessInput(side, batch, count); err != nil {
			b.Fatal(err)
		}
		if err := wmh.OnWatermark(min(n[0], n[1])*3/2-1001, count); err != nil {
			b.Fatal(err)
		}
		peak = max(peak, 2*timers.Len(statestore.EventTime))
	}
	elapsed := time.Since(start)
	if entries := stateEntries(b, backend); entries != timers.Len(statestore.EventTime) {
		b.Fatalf("%d buffers, %d timers: want one timer per buffer", entries, timers.Len(statestore.EventTime))
	}
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N*benchBatch), "ns/event")
	b.ReportMetric(float64(outputs)/float64(b.N*benchBatch), "results/event")
	b.ReportMetric(float64(peak), "peak-state-entries")
}

// BenchmarkIntervalJoinPipeline runs a whole pipeline through a
// pipeline.Runner: two generators of 1M records each, the interval join
// of BenchmarkIntervalJoin at parallelism 1 (select: three fields; merge:
// no select), a blackhole sink. Record i of a side has the key
// (i * 7919) % 10000 (each of 10,000 keys once in every 10,000 records,
// in a scrambled order) and the time 1.5 * i ms plus up to 500 ms of
// disorder, with a watermark 1s behind: each left record joins the one
// right record of its key 15s around it. The generators' expressions are
// arithmetic, cheap next to the join. It measures the runtime (batching,
// hash partitioning of two inputs, watermarks) as well as the join, and
// reports input events/s.
func BenchmarkIntervalJoinPipeline(b *testing.B) {
	b.Run("select", func(b *testing.B) {
		benchIntervalJoinPipeline(b, "      select: {id: left.id, lv: left.v, rv: right.v}\n")
	})
	b.Run("merge", func(b *testing.B) { benchIntervalJoinPipeline(b, "") })
}

func benchIntervalJoinPipeline(b *testing.B, sel string) {
	const perSide = 1_000_000
	source := func(id string, jitter int) string {
		return fmt.Sprintf(`  - id: %s
    type: generator
    count: %d
    fields:
      id: (i * 7919) %% 10000
      v: i %% 100
      ts: i * 3 / 2 + (i * %d) %% 501
    event_time: ts
    watermark: {max_out_of_orderness: 1s}
`, id, perSide, jitter)
	}
	spec, err := pipeline.Load(pipeline.Default, "bench.yaml", []byte(`version: 1
name: interval-join-bench
sources:
`+source("bids", 31)+source("asks", 97)+`steps:
  - id: joined
    join:
      left: bids
      right: asks
      on: {left: id, right: id}
      between: {lower: -5s, upper: 10s}
`+sel+`sinks:
  - id: out
    type: blackhole
`))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for b.Loop() {
		r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
		if err == nil {
			err = r.Run(context.Background())
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*2*perSide/time.Since(start).Seconds(), "events/s")
}
