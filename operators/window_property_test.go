package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// TestWindowProperty runs random out-of-order input (random keys, bounded
// disorder, some records far behind) through tumbling, sliding and session
// windows with random allowed lateness, a watermark after every record
// (watermark.interval: 0), and compares every step's results, re-firings
// and late records with a naive implementation of the window semantics
// written from the rules alone: windows are kept as lists of values, all windows
// of a record are computed by enumeration, and nothing is incremental.
func TestWindowProperty(t *testing.T) {
	runs := 300
	if testing.Short() {
		runs = 60
	}
	for seed := range runs {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		cfg := randomWindowConfig(rng, seed)
		t.Run(fmt.Sprintf("%d/%s", seed, cfg.name()), func(t *testing.T) { checkAgainstReference(t, rng, cfg) })
	}
}

type propConfig struct {
	kind                               windowKind
	size, slide, offset, gap, lateness int64
	lateOutput                         bool
	bound                              int64
}

func (c propConfig) name() string {
	switch c.kind {
	case kindSession:
		return fmt.Sprintf("session_gap%d_late%d_B%d", c.gap, c.lateness, c.bound)
	case kindSliding:
		return fmt.Sprintf("sliding_%d_%d_off%d_late%d_B%d", c.size, c.slide, c.offset, c.lateness, c.bound)
	}
	return fmt.Sprintf("tumbling_%d_off%d_late%d_B%d", c.size, c.offset, c.lateness, c.bound)
}

func (c propConfig) step() string {
	var w string
	switch c.kind {
	case kindTumbling:
		w = fmt.Sprintf("{type: tumbling, size: %dms, offset: %dms}", c.size, c.offset)
	case kindSliding:
		w = fmt.Sprintf("{type: sliding, size: %dms, slide: %dms, offset: %dms}", c.size, c.slide, c.offset)
	case kindSession:
		w = fmt.Sprintf("{type: session, gap: %dms}", c.gap)
	}
	s := "key_by: key\n    window: " + w + fmt.Sprintf("\n    allowed_lateness: %dms", c.lateness) +
		"\n    aggregate: {n: count(), total: sum(v), lo: min(v), hi: max(v)}"
	if c.lateOutput {
		s += "\n    late_output: late"
	}
	return s
}

func randomWindowConfig(rng *rand.Rand, seed int) propConfig {
	c := propConfig{kind: []windowKind{kindTumbling, kindSliding, kindSession}[seed%3]}
	c.size = []int64{500, 1000, 3000}[rng.IntN(3)]
	switch c.kind {
	case kindTumbling:
		c.slide = c.size
	case kindSliding:
		c.slide = []int64{c.size / 2, c.size / 5, c.size / 3 * 2, 400}[rng.IntN(4)]
		c.slide = min(c.slide, c.size)
	case kindSession:
		c.gap = []int64{100, 300, 1000}[rng.IntN(3)]
	}
	if c.kind != kindSession {
		c.offset = rng.Int64N(c.slide) - c.slide/2
	}
	c.lateness = []int64{0, 0, 200, 1000, 5000}[rng.IntN(5)]
	c.lateOutput = rng.IntN(2) == 0
	c.bound = []int64{0, 100, 500}[rng.IntN(3)]
	return c
}

// step is what one call produced: results and late records, as sorted
// canonical JSON.
type stepOut struct {
	what          string
	results, late []string
}

// action is one call of a run: a record, or a watermark (rec nil).
type action struct {
	rec *pipeline.Record
	wm  int64
}

// propOp is a window operator on its own backend.
type propOp struct {
	op        pipeline.Operator
	backend   *statestore.Memory
	out, late *collector
	metrics   *pipeline.Metrics
	info      pipeline.SubtaskInfo
}

func openPropOp(t *testing.T, cfg pipeline.StepConfig, blobs [][]byte) *propOp {
	op, err := cfg.NewOperator()
	require.NoError(t, err)
	p := &propOp{op: op, out: &collector{}, late: &collector{}, metrics: pipeline.NewMetrics()}
	p.info = pipeline.SubtaskInfo{ID: "s", Parallelism: 1, MaxParallelism: 128, Logger: slog.Default(), Metrics: p.metrics}
	p.backend, err = statestore.NewMemory(statestore.Options{KeyGroup: func(k string) int { return pipeline.KeyGroup(k, 128) }, KeyGroups: [2]int{0, 128}})
	require.NoError(t, err)
	require.NoError(t, p.backend.Restore(blobs...))
	oc := &pipeline.OperatorContext{SubtaskInfo: p.info, KeyedState: func() (statestore.Backend, error) { return p.backend, nil },
		Side: func(string) pipeline.Emitter { return p.late }}
	require.NoError(t, op.Open(context.Background(), oc))
	t.Cleanup(func() { require.NoError(t, op.Close()) })
	return p
}

// do runs one action and returns what it produced.
func (p *propOp) do(t *testing.T, a action, what string) stepOut {
	if a.rec != nil {
		require.NoError(t, p.op.Process([]pipeline.Record{a.rec.Clone()}, p.out))
	} else {
		require.NoError(t, p.op.(pipeline.WatermarkHandler).OnWatermark(a.wm, p.out))
		if a.wm == pipeline.MaxWatermark {
			require.NoError(t, p.op.(pipeline.Finisher).Finish(p.out))
		}
	}
	got := stepOut{what: what, results: canon(p.out.records), late: canon(p.late.records)}
	p.out.records, p.late.records = nil, nil
	return got
}

func checkAgainstReference(t *testing.T, rng *rand.Rand, c propConfig) {
	spec, err := loadSteps(stepYAML(c.step()))
	require.NoError(t, err, c.step())
	cfg := spec.Steps[0].Config
	p := openPropOp(t, cfg, nil)
	ref := newReference(c)

	// The input: records of a few keys, bounded disorder plus some far
	// behind, and the watermark a source with interval 0 emits after each.
	var actions []action
	n := 100 + rng.IntN(300)
	keys := 1 + rng.IntN(5)
	now, maxTs, wm := rng.Int64N(4000)-2000, int64(-1<<62), pipeline.MinWatermark
	for range n {
		now += rng.Int64N(120)
		ts := now - rng.Int64N(c.bound+1)
		if rng.IntN(15) == 0 {
			ts = now - c.bound - rng.Int64N(8000) // far behind: often late
		}
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		key, _ := pipeline.EncodeKey(nil, k)
		actions = append(actions, action{rec: &pipeline.Record{Fields: map[string]any{"key": k, "v": int64(rng.IntN(100))}, Time: ts, Key: string(key)}})
		maxTs = max(maxTs, ts)
		if next := maxTs - c.bound - 1; next > wm {
			wm = next
			actions = append(actions, action{wm: wm})
		}
	}
	actions = append(actions, action{wm: pipeline.MaxWatermark})

	// A snapshot is taken before action snapAt; the run goes on writing
	// the backend (copy-on-write keeps the snapshot intact).
	snapAt := rng.IntN(len(actions))
	type encodedSnap struct {
		blobs [][]byte
		err   error
	}
	encoded := make(chan encodedSnap, 1)
	snapWM := pipeline.MinWatermark
	outs := make([]stepOut, len(actions))
	for i, a := range actions {
		if i == snapAt {
			// The snapshot encodes on another goroutine while the run goes
			// on (the race detector checks copy-on-write).
			snap, err := p.backend.Snapshot()
			require.NoError(t, err)
			go func() {
				_, blobs, err := statestoretest.Blobs(snap)
				snap.Release()
				encoded <- encodedSnap{blobs, err}
			}()
		}
		var what string
		var want stepOut
		if a.rec != nil {
			what = fmt.Sprintf("action %d: record %v ts=%d at W=%d", i, a.rec.Fields, a.rec.Time, ref.wm)
			want = ref.record(a.rec.Fields["key"].(string), a.rec.Time, a.rec.Fields["v"].(int64), what)
		} else {
			what = fmt.Sprintf("action %d: watermark %d", i, a.wm)
			want = ref.watermark(a.wm, what)
			if i < snapAt {
				snapWM = a.wm
			}
		}
		outs[i] = p.do(t, a, what)
		require.Equal(t, want, outs[i])
	}
	if !c.lateOutput {
		require.Equal(t, float64(ref.dropped), pipeline.CounterValue(p.metrics.LateDropped(p.info)))
	}
	require.Zero(t, p.backend.TimerService("s").Len(statestore.EventTime), "no timer left")
	for _, name := range p.backend.StateNames() {
		st, _ := p.backend.State(name)
		for g := range 128 {
			for k := range st.Keys(g) {
				t.Fatalf("state %s still holds key %q after the end", name, k)
			}
		}
	}

	// Restore the snapshot into a new operator; with the watermark it had
	// seen, the rest of the input gives the same results.
	e := testkit.WaitFor(t, encoded, "the snapshot to encode")
	require.NoError(t, e.err)
	q := openPropOp(t, cfg, e.blobs)
	if snapWM != pipeline.MinWatermark {
		require.Equal(t, stepOut{what: "rewatermark", results: []string{}, late: []string{}}, q.do(t, action{wm: snapWM}, "rewatermark"))
	}
	for i := snapAt; i < len(actions); i++ {
		require.Equal(t, outs[i], q.do(t, actions[i], outs[i].what), "after the restore of a snapshot taken before action %d", snapAt)
	}
}

func canon(recs []pipeline.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		b, _ := json.Marshal(r.Fields)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// reference is the naive implementation.
type reference struct {
	c       propConfig
	wm      int64
	wins    map[string]map[int64]*refWindow // time windows by key, start
	sess    map[string][]*refWindow
	dropped int
}

type refWindow struct {
	start, end int64
	vals       []int64
}

func newReference(c propConfig) *reference {
	return &reference{c: c, wm: pipeline.MinWatermark, wins: map[string]map[int64]*refWindow{}, sess: map[string][]*refWindow{}}
}

func (r *reference) late(end int64) bool { return end-1+r.c.lateness <= r.wm }

func (r *reference) result(key string, w *refWindow, firing string) string {
	total, lo, hi := int64(0), w.vals[0], w.vals[0]
	for _, v := range w.vals {
		total += v
		lo, hi = min(lo, v), max(hi, v)
	}
	b, _ := json.Marshal(map[string]any{"key": key, "n": len(w.vals), "total": total, "lo": lo, "hi": hi,
		"window_start": w.start, "window_end": w.end, "_firing": firing})
	return string(b)
}

func (r *reference) lateRecord(o *stepOut, key string, v, start, end int64) {
	if !r.c.lateOutput {
		r.dropped++
		return
	}
	b, _ := json.Marshal(map[string]any{"key": key, "v": v, "window_start": start, "window_end": end})
	o.late = append(o.late, string(b))
}

func (r *reference) record(key string, ts, v int64, what string) stepOut {
	o := stepOut{what: what, results: []string{}, late: []string{}}
	defer func() { slices.Sort(o.results); slices.Sort(o.late) }()
	if r.c.kind == kindSession {
		start, end := ts, ts+r.c.gap
		merged := &refWindow{start: start, end: end, vals: []int64{v}}
		var keep []*refWindow
		touched := false
		for _, s := range r.sess[key] {
			if s.start <= end && s.end >= start {
				touched = true
				merged.start, merged.end = min(merged.start, s.start), max(merged.end, s.end)
				merged.vals = append(merged.vals, s.vals...)
				continue
			}
			keep = append(keep, s)
		}
		if !touched && r.late(end) {
			r.lateRecord(&o, key, v, start, end)
			return o
		}
		r.sess[key] = append(keep, merged)
		if merged.end-1 <= r.wm {
			o.results = append(o.results, r.result(key, merged, firingLateUpdate))
		}
		return o
	}
	// Every window [s, s+size) with s = k*slide + offset containing ts.
	var starts []int64
	for s := ts - floorMod(ts-r.c.offset, r.c.slide); s > ts-r.c.size; s -= r.c.slide {
		starts = append(starts, s)
	}
	slices.Sort(starts)
	var live []int64
	for _, s := range starts {
		if !r.late(s + r.c.size) {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		r.lateRecord(&o, key, v, starts[0], starts[0]+r.c.size)
		return o
	}
	if r.wins[key] == nil {
		r.wins[key] = map[int64]*refWindow{}
	}
	for _, s := range live {
		w := r.wins[key][s]
		if w == nil {
			w = &refWindow{start: s, end: s + r.c.size}
			r.wins[key][s] = w
		}
		w.vals = append(w.vals, v)
		if w.end-1 <= r.wm {
			o.results = append(o.results, r.result(key, w, firingLateUpdate))
		}
	}
	return o
}

func (r *reference) watermark(wm int64, what string) stepOut {
	o := stepOut{what: what, results: []string{}, late: []string{}}
	prev := r.wm
	r.wm = wm
	for key, ws := range r.wins {
		for s, w := range ws {
			if prev < w.end-1 && w.end-1 <= wm {
				o.results = append(o.results, r.result(key, w, firingOnTime))
			}
			if r.late(w.end) {
				delete(ws, s)
			}
		}
	}
	for key, ss := range r.sess {
		var keep []*refWindow
		for _, s := range ss {
			if prev < s.end-1 && s.end-1 <= wm {
				o.results = append(o.results, r.result(key, s, firingOnTime))
			}
			if !r.late(s.end) {
				keep = append(keep, s)
			}
		}
		r.sess[key] = keep
	}
	slices.Sort(o.results)
	return o
}
