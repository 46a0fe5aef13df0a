package operators

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// TestWindowJoinProperty runs random input of both sides (a few keys,
// bounded disorder plus records far behind, batches of one side, random
// watermarks and restores) through window joins of every type over
// tumbling, sliding and session windows with random allowed lateness, and
// compares the rows and late records, as multisets, with a reference
// written from the rules alone: each window is a list of the records it
// accepted, and when the watermark purges it, a nested loop pairs its
// records (and pads them when the other side has none). Nothing in it is
// incremental: it knows nothing of fired marks or of pairs emitted early.
//
// Rows carry the window's bounds and time. They must equal the
// reference's, except for the pairs of a session with allowed lateness
// that a late record emits before the session grew further: those carry
// the session's bounds of then, which the final session's contain.
// Without allowed lateness every watermark must emit exactly what the
// reference purges at it, and no record may emit anything.
func TestWindowJoinProperty(t *testing.T) {
	runs := 400
	if testing.Short() {
		runs = 80
	}
	for seed := range runs {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		c := randomWJConfig(rng, seed)
		t.Run(fmt.Sprintf("%d/%s", seed, c.name()), func(t *testing.T) {
			acts := randomWJInput(rng, c, true)
			ref := newWJRef(c)
			run := newWJRun(t, c)
			for i, a := range acts {
				before := len(ref.rows)
				ref.do(a)
				rows := run.do(a)
				if c.lateness == 0 {
					require.Equal(t, wjSortedRows(ref.rows[before:]), wjSortedRows(rows), "action %d: %+v", i, a)
				}
			}
			run.checkEnd(ref, c.kind != kindSession || c.lateness == 0)
		})
	}
}

// TestWindowJoinArrivalOrder feeds the same records (equal timestamps
// common, both sides, random keys) in several random orders and batchings,
// with a restore at a random point, and the final watermark at the end:
// the rows, their windows and times, are the same every time and equal
// the reference's.
func TestWindowJoinArrivalOrder(t *testing.T) {
	runs := 120
	if testing.Short() {
		runs = 30
	}
	for seed := range runs {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		c := randomWJConfig(rng, seed)
		t.Run(fmt.Sprintf("%d/%s", seed, c.name()), func(t *testing.T) {
			var recs []wjInput
			for _, a := range randomWJInput(rng, c, false) {
				recs = append(recs, a.recs...)
			}
			ref := newWJRef(c)
			for _, r := range recs {
				ref.do(wjAction{recs: []wjInput{r}})
			}
			ref.do(wjAction{wm: pipeline.MaxWatermark})
			require.NotEmpty(t, recs)
			for range 4 {
				rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
				run := newWJRun(t, c)
				restartAt := rng.IntN(len(recs) + 1)
				for i := 0; i < len(recs); {
					if i == restartAt {
						run.do(wjAction{restart: true})
					}
					n := 1
					for i+n < len(recs) && recs[i+n].side == recs[i].side && rng.IntN(2) == 0 {
						n++
					}
					require.Empty(t, run.do(wjAction{recs: recs[i : i+n]}), "no row before a watermark")
					i += n
				}
				run.do(wjAction{wm: pipeline.MaxWatermark})
				run.checkEnd(ref, true) // nothing fired before the end

			}
		})
	}
}

// wjConfig is a random window join.
type wjConfig struct {
	kind                               windowKind
	typ                                joinType
	size, slide, offset, gap, lateness int64
	lateOutput                         bool
	bound                              int64
}

var wjTypes = [...]string{"inner", "left", "right", "full"}

func (c wjConfig) name() string {
	w := fmt.Sprintf("tumbling_%d_off%d", c.size, c.offset)
	switch c.kind {
	case kindSliding:
		w = fmt.Sprintf("sliding_%d_%d_off%d", c.size, c.slide, c.offset)
	case kindSession:
		w = fmt.Sprintf("session_gap%d", c.gap)
	}
	return fmt.Sprintf("%s_%s_late%d_B%d", wjTypes[c.typ], w, c.lateness, c.bound)
}

func (c wjConfig) step() string {
	w := fmt.Sprintf("{type: tumbling, size: %dms, offset: %dms}", c.size, c.offset)
	switch c.kind {
	case kindSliding:
		w = fmt.Sprintf("{type: sliding, size: %dms, slide: %dms, offset: %dms}", c.size, c.slide, c.offset)
	case kindSession:
		w = fmt.Sprintf("{type: session, gap: %dms}", c.gap)
	}
	s := "join:\n      left: in\n      right: in\n      on: {left: k, right: k}\n      type: " + wjTypes[c.typ] +
		"\n      window: " + w +
		"\n      select: {l: left.id, r: right.id, ws: window_start, we: window_end}" +
		fmt.Sprintf("\n    allowed_lateness: %dms", c.lateness)
	if c.lateOutput {
		s += "\n    late_output: late"
	}
	return s
}

func randomWJConfig(rng *rand.Rand, seed int) wjConfig {
	c := wjConfig{kind: []windowKind{kindTumbling, kindSliding, kindSession}[seed%3], typ: joinType(seed / 3 % 4)}
	c.size = []int64{500, 1000, 3000}[rng.IntN(3)]
	c.slide = c.size
	switch c.kind {
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

// wjInput is a record of one side.
type wjInput struct {
	side    int
	id, key string
	ts      int64
}

// wjAction is one call: a batch of one side's records, a watermark, or a
// restore (snapshot, then a new operator on the restored state).
type wjAction struct {
	recs    []wjInput
	wm      int64
	restart bool
}

// randomWJInput returns records of both sides in batches of one side;
// with watermarks, random watermarks (and restores) between them. Without,
// timestamps repeat often.
func randomWJInput(rng *rand.Rand, c wjConfig, watermarks bool) []wjAction {
	var acts []wjAction
	n := 20 + rng.IntN(80)
	keys := 1 + rng.IntN(3)
	now, wm := rng.Int64N(2000)-1000, int64(pipeline.MinWatermark)
	// behind counts the records still to come after a restore that are
	// far behind: until the next watermark none is late (the watermark
	// starts over), and they open windows before those that fired.
	behind := 0
	for i := range n {
		now += rng.Int64N(150)
		ts := now - rng.Int64N(c.bound+1)
		switch {
		case !watermarks:
			ts = rng.Int64N(30) * 100
		case behind > 0:
			behind--
			ts = now - rng.Int64N(3000)
		case rng.IntN(10) == 0:
			ts = now - rng.Int64N(6000) // far behind: often late
		}
		side := rng.IntN(2)
		in := wjInput{side: side, id: fmt.Sprintf("%c%d", sideNames[side][0], i), key: fmt.Sprintf("k%d", rng.IntN(keys)), ts: ts}
		if last := len(acts) - 1; last >= 0 && acts[last].recs != nil && acts[last].recs[0].side == side && rng.IntN(2) == 0 {
			acts[last].recs = append(acts[last].recs, in)
		} else {
			acts = append(acts, wjAction{recs: []wjInput{in}})
		}
		if watermarks && rng.IntN(4) == 0 {
			wm = max(wm, now-c.bound-rng.Int64N(1000))
			acts = append(acts, wjAction{wm: wm})
		}
		if watermarks && rng.IntN(15) == 0 {
			acts = append(acts, wjAction{restart: true})
			behind = rng.IntN(4)
		}
	}
	return append(acts, wjAction{wm: pipeline.MaxWatermark})
}

// wjRow is an output row: the left and right ids ("": padded), the
// window's start and end, and the time.
type wjRow struct {
	l, r       string
	start, end int64
	t          int64
}

// wjSortedRows returns a sorted copy of rows (nil for none), to compare
// multisets.
func wjSortedRows(rows []wjRow) []wjRow {
	if len(rows) == 0 {
		return nil
	}
	return slices.SortedFunc(slices.Values(rows), func(a, b wjRow) int {
		return cmp.Or(strings.Compare(a.l, b.l), strings.Compare(a.r, b.r), cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end), cmp.Compare(a.t, b.t))
	})
}

// padded reports whether the row lacks a side.
func (r wjRow) padded() bool { return r.l == "" || r.r == "" }

// wjRef is the reference window join.
type wjRef struct {
	c    wjConfig
	wm   int64
	wins map[string]*wjWindow // time windows by key and start
	sess map[string][]*wjWindow
	rows []wjRow
	// late holds the late records as id/side.
	late []string
}

// wjWindow is a window of one key and the records it accepted.
type wjWindow struct {
	key        string
	start, end int64
	recs       []wjInput
}

func newWJRef(c wjConfig) *wjRef {
	return &wjRef{c: c, wm: pipeline.MinWatermark, wins: map[string]*wjWindow{}, sess: map[string][]*wjWindow{}}
}

func (r *wjRef) isLate(end int64) bool { return end-1+r.c.lateness <= r.wm }

func (r *wjRef) do(a wjAction) {
	switch {
	case a.restart:
		r.wm = pipeline.MinWatermark // snapshots do not hold the watermark
	case a.recs != nil:
		for _, in := range a.recs {
			if !r.record(in) {
				r.late = append(r.late, in.id+"/"+sideNames[in.side])
			}
		}
	default:
		r.watermark(a.wm)
	}
}

// record adds in to the windows that accept it, and reports whether one
// did.
func (r *wjRef) record(in wjInput) bool {
	if r.c.kind == kindSession {
		merged := &wjWindow{key: in.key, start: in.ts, end: in.ts + r.c.gap, recs: []wjInput{in}}
		var keep []*wjWindow
		touched := false
		for _, s := range r.sess[in.key] {
			if s.start <= merged.end && s.end >= in.ts {
				touched = true
				merged.start, merged.end = min(merged.start, s.start), max(merged.end, s.end)
				merged.recs = append(merged.recs, s.recs...)
				continue
			}
			keep = append(keep, s)
		}
		if !touched && r.isLate(merged.end) {
			return false
		}
		r.sess[in.key] = append(keep, merged)
		return true
	}
	accepted := false
	for s := in.ts - floorMod(in.ts-r.c.offset, r.c.slide); s > in.ts-r.c.size; s -= r.c.slide {
		id := fmt.Sprintf("%s/%d", in.key, s)
		w, ok := r.wins[id]
		if !ok {
			if r.isLate(s + r.c.size) {
				continue
			}
			w = &wjWindow{key: in.key, start: s, end: s + r.c.size}
			r.wins[id] = w
		}
		w.recs = append(w.recs, in)
		accepted = true
	}
	return accepted
}

// watermark purges the windows whose end - 1 + lateness it reaches.
func (r *wjRef) watermark(wm int64) {
	if wm <= r.wm {
		return
	}
	r.wm = wm
	for id, w := range r.wins {
		if r.isLate(w.end) {
			r.purge(w)
			delete(r.wins, id)
		}
	}
	for key, ss := range r.sess {
		r.sess[key] = slices.DeleteFunc(ss, func(w *wjWindow) bool {
			if r.isLate(w.end) {
				r.purge(w)
				return true
			}
			return false
		})
	}
}

// purge emits every pair of w by a nested loop, and the padded rows of a
// side kept unmatched when the other side has no record in w.
func (r *wjRef) purge(w *wjWindow) {
	var sides [2][]wjInput
	for _, in := range w.recs {
		sides[in.side] = append(sides[in.side], in)
	}
	for _, l := range sides[sideLeft] {
		for _, rr := range sides[sideRight] {
			r.rows = append(r.rows, wjRow{l.id, rr.id, w.start, w.end, w.end - 1})
		}
	}
	for side := range 2 {
		if len(sides[1-side]) > 0 || !r.c.typ.keepsUnmatched(side) {
			continue
		}
		for _, in := range sides[side] {
			row := wjRow{l: in.id, start: w.start, end: w.end, t: w.end - 1}
			if side == sideRight {
				row.l, row.r = "", in.id
			}
			r.rows = append(r.rows, row)
		}
	}
}

// wjRun drives the window join operator.
type wjRun struct {
	t       *testing.T
	c       wjConfig
	cfg     pipeline.StepConfig
	p       *propOp
	rows    []wjRow
	late    []string
	dropped float64
}

func newWJRun(t *testing.T, c wjConfig) *wjRun {
	spec, err := loadSteps(stepYAML(c.step()))
	require.NoError(t, err, c.step())
	cfg := spec.Steps[0].Config
	return &wjRun{t: t, c: c, cfg: cfg, p: openPropOp(t, cfg, nil)}
}

// do runs one action and returns the rows it emitted.
func (w *wjRun) do(a wjAction) []wjRow {
	t, p := w.t, w.p
	switch {
	case a.restart:
		snap, err := p.backend.Snapshot()
		require.NoError(t, err)
		_, blobs, err := statestoretest.Blobs(snap)
		require.NoError(t, err)
		snap.Release()
		w.dropped += pipeline.CounterValue(p.metrics.LateDropped(p.info))
		w.p = openPropOp(t, w.cfg, blobs)
		return nil
	case a.recs != nil:
		recs := make([]pipeline.Record, len(a.recs))
		for i, in := range a.recs {
			key, err := pipeline.EncodeKey(nil, in.key)
			require.NoError(t, err)
			recs[i] = pipeline.Record{Fields: map[string]any{"k": in.key, "id": in.id}, Time: in.ts, Key: string(key)}
		}
		require.NoError(t, p.op.(pipeline.MultiInputOperator).ProcessInput(a.recs[0].side, recs, p.out))
	default:
		require.NoError(t, p.op.(pipeline.WatermarkHandler).OnWatermark(a.wm, p.out))
	}
	var rows []wjRow
	for _, r := range p.out.records {
		f := r.Fields
		row := wjRow{start: f["ws"].(int64), end: f["we"].(int64), t: r.Time}
		row.l, _ = f["l"].(string)
		row.r, _ = f["r"].(string)
		require.Equal(t, row.end-1, row.t, "a row's time is its window's end - 1")
		rows = append(rows, row)
	}
	for _, r := range p.late.records {
		w.late = append(w.late, fmt.Sprintf("%v/%v", r.Fields["id"], r.Fields[fieldSide]))
	}
	p.out.records, p.late.records = nil, nil
	w.rows = append(w.rows, rows...)
	return rows
}

// checkEnd compares everything emitted with the reference's, and checks
// that no state or timer is left. Unless exact, a pair may carry bounds
// within the reference's (a session that grew after the pair went out).
func (w *wjRun) checkEnd(ref *wjRef, exact bool) {
	t := w.t
	if exact {
		require.Equal(t, wjSortedRows(ref.rows), wjSortedRows(w.rows))
	} else {
		wjRequireRowsWithin(t, ref.rows, w.rows)
	}
	if w.c.lateOutput {
		require.ElementsMatch(t, ref.late, w.late)
	} else {
		require.Empty(t, w.late)
		require.Equal(t, float64(len(ref.late)), w.dropped+pipeline.CounterValue(w.p.metrics.LateDropped(w.p.info)))
	}
	require.Zero(t, stateEntries(t, w.p.backend)+timerCount(w.p.backend, "s"), "state left after the final watermark")
}

// wjRequireRowsWithin checks that got has the rows of want, each pair once,
// where a pair of got may carry bounds within want's; padded rows are
// exact.
func wjRequireRowsWithin(t *testing.T, want, got []wjRow) {
	type pair struct{ l, r string }
	byPair := map[pair]wjRow{}
	for _, r := range want {
		byPair[pair{r.l, r.r}] = r
	}
	require.Len(t, got, len(want))
	seen := map[pair]bool{}
	for _, g := range got {
		p := pair{g.l, g.r}
		w, ok := byPair[p]
		require.True(t, ok, "row %+v is not the reference's", g)
		require.False(t, seen[p], "row %+v twice", g)
		seen[p] = true
		if g.padded() {
			require.Equal(t, w, g)
			continue
		}
		require.True(t, w.start <= g.start && g.end <= w.end, "row %+v: the final session is %+v", g, w)
	}
}

// wjOp is a join operator opened on its own memory backend, with
// collectors for its output, late output and dead letters.
type wjOp struct {
	op              pipeline.Operator
	out, late, dead *collector
}

// openWJ opens the operator of the step with id id of the pipeline
// text, under the step's on_error.
func openWJ(t *testing.T, text, id string) *wjOp {
	spec, err := pipeline.Load(testEnv(), "t.yaml", []byte(text))
	require.NoError(t, err)
	var step *pipeline.StepSpec
	for _, s := range spec.Steps {
		if s.ID == id {
			step = s
		}
	}
	require.NotNil(t, step)
	op, err := step.Config.NewOperator()
	require.NoError(t, err)
	j := &wjOp{op: op, out: &collector{}, late: &collector{}, dead: &collector{}}
	info := pipeline.SubtaskInfo{ID: id, Parallelism: 1, MaxParallelism: 128, Logger: slog.Default(), Metrics: pipeline.NewMetrics()}
	oc := &pipeline.OperatorContext{SubtaskInfo: info, Errors: pipeline.NewErrorHandler(info, step.OnError, j.dead),
		Side: func(string) pipeline.Emitter { return j.late }}
	require.NoError(t, op.Open(context.Background(), oc))
	t.Cleanup(func() { require.NoError(t, op.Close()) })
	return j
}

// input feeds records of side, each keyed by its field key.
func (j *wjOp) input(t *testing.T, side int, key string, ts []int64, recs ...map[string]any) error {
	batch := make([]pipeline.Record, len(recs))
	for i, f := range recs {
		k, err := pipeline.EncodeKey(nil, f[key])
		require.NoError(t, err)
		batch[i] = pipeline.Record{Fields: f, Time: ts[i], Key: string(k)}
	}
	return j.op.(pipeline.MultiInputOperator).ProcessInput(side, batch, j.out)
}

// The example of docs/joins.md's window join section loads, and the
// records of its table give the rows the page shows, at time 9,999.
func TestWindowJoinDocExample(t *testing.T) {
	doc, err := os.ReadFile("../docs/joins.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## Window join\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := yamlBlock.FindAllStringSubmatch(section, -1)
	require.Len(t, blocks, 1)
	j := openWJ(t, "version: 1\nname: t\nsources:\n  - id: bids\n    type: test\n  - id: auctions\n    type: test\n"+
		blocks[0][1]+"sinks:\n  - id: out\n    type: test\n", "bid_auction")
	require.NoError(t, j.input(t, sideLeft, "auction", []int64{1000, 9999},
		map[string]any{"auction": int64(7), "price": int64(12)}, map[string]any{"auction": int64(7), "price": int64(15)}))
	require.NoError(t, j.input(t, sideRight, "id", []int64{4000, 10000},
		map[string]any{"id": int64(7), "seller": "ann"}, map[string]any{"id": int64(7), "seller": "bob"}))
	require.NoError(t, j.op.(pipeline.WatermarkHandler).OnWatermark(9999, j.out))
	var got []string
	for _, r := range j.out.records {
		require.Equal(t, int64(9999), r.Time)
		b, err := json.Marshal(r.Fields)
		require.NoError(t, err)
		got = append(got, string(b))
	}
	want := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, want)
	require.ElementsMatch(t, strings.Split(strings.TrimSpace(want[1]), "\n"), got)
}

// wjStep is a tumbling window join of in with itself on k whose
// select divides by left.d, with the given on_error.
func wjStep(onError string) string {
	return header + stepYAML("join:\n      left: in\n      right: in\n      on: {left: k, right: k}\n"+
		"      window: {type: tumbling, size: 10s}\n      select: {q: right.v / left.d}\n    on_error: "+onError) +
		"sinks:\n  - id: out\n    type: test\n  - id: dead\n    type: test\n    from: s.errors\n"
}

// A row whose select fails goes to the dead letters as the record
// {left, right} of its pair; the window's other rows are emitted.
func TestWindowJoinDeadLetter(t *testing.T) {
	j := openWJ(t, wjStep("dead_letter"), "s")
	require.NoError(t, j.input(t, sideLeft, "k", []int64{1000, 2000},
		map[string]any{"k": "a", "d": int64(0)}, map[string]any{"k": "a", "d": int64(2)}))
	require.NoError(t, j.input(t, sideRight, "k", []int64{3000}, map[string]any{"k": "a", "v": int64(10)}))
	require.NoError(t, j.op.(pipeline.WatermarkHandler).OnWatermark(9999, j.out))
	require.Len(t, j.out.records, 1)
	require.Equal(t, map[string]any{"q": 5.0}, j.out.records[0].Fields)
	require.Len(t, j.dead.records, 1)
	require.Equal(t, map[string]any{"left": map[string]any{"k": "a", "d": int64(0)}, "right": map[string]any{"k": "a", "v": int64(10)}},
		j.dead.records[0].Fields["record"])
	require.Contains(t, j.dead.records[0].Fields["error"], `join field "q": expression "right.v / left.d"`)
}

// Under on_error: fail, a row whose select fails fails the watermark's
// call; the rows before it are emitted first.
func TestWindowJoinFail(t *testing.T) {
	j := openWJ(t, wjStep("fail"), "s")
	require.NoError(t, j.input(t, sideLeft, "k", []int64{1000, 2000},
		map[string]any{"k": "a", "d": int64(2)}, map[string]any{"k": "a", "d": int64(0)}))
	require.NoError(t, j.input(t, sideRight, "k", []int64{3000}, map[string]any{"k": "a", "v": int64(10)}))
	err := j.op.(pipeline.WatermarkHandler).OnWatermark(9999, j.out)
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.Len(t, j.out.records, 1)
	require.Equal(t, map[string]any{"q": 5.0}, j.out.records[0].Fields)
}
