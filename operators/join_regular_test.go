package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// regularOp is a regular join on a memory backend of its own, whose
// clock is the test's.
type regularOp struct {
	t       testing.TB
	plan    *joinPlan
	op      *regularJoin
	backend *statestore.Memory
	out     *collector
	clock   int64
	wakes   []int64 // the WakeAt requests
}

func openRegular(t testing.TB, plan *joinPlan, blobs [][]byte) *regularOp {
	r := &regularOp{t: t, plan: plan, out: &collector{}}
	r.open(blobs)
	return r
}

// open opens a new operator on a new backend restored from blobs.
func (r *regularOp) open(blobs [][]byte) {
	t := r.t
	var err error
	r.backend, err = statestore.NewMemory(statestore.Options{
		KeyGroup:  func(k string) int { return pipeline.KeyGroup(k, 128) },
		KeyGroups: [2]int{0, 128},
		Clock:     func() int64 { return r.clock },
	})
	require.NoError(t, err)
	require.NoError(t, r.backend.Restore(blobs...))
	info := pipeline.SubtaskInfo{ID: "s", Parallelism: 1, MaxParallelism: 128, Logger: slog.Default(), Metrics: pipeline.NewMetrics()}
	oc := &pipeline.OperatorContext{
		SubtaskInfo: info,
		KeyedState:  func() (statestore.Backend, error) { return r.backend, nil },
		Now:         func() int64 { return r.clock },
		WakeAt:      func(at int64) { r.wakes = append(r.wakes, at) },
	}
	r.op = newRegularJoin(r.plan)
	require.NoError(t, r.op.Open(context.Background(), oc))
	op, backend := r.op, r.backend
	t.Cleanup(func() {
		require.NoError(t, op.Close())
		require.NoError(t, backend.Close())
	})
}

// restart snapshots the state and restores it into a new operator.
func (r *regularOp) restart() {
	snap, err := r.backend.Snapshot()
	require.NoError(r.t, err)
	_, blobs, err := statestoretest.Blobs(snap)
	require.NoError(r.t, err)
	snap.Release()
	r.open(blobs)
}

// input passes records of one side and returns what they emitted.
func (r *regularOp) input(side int, recs ...pipeline.Record) []pipeline.Record {
	require.NoError(r.t, r.op.ProcessInput(side, recs, r.out))
	got := r.out.records
	r.out.records = nil
	return got
}

// joinRec returns a record of key k with the given fields, keyed as the
// runtime keys it.
func joinRec(k string, fields map[string]any) pipeline.Record {
	key, _ := pipeline.EncodeKey(nil, k)
	fields["k"] = k
	return pipeline.Record{Fields: fields, Time: pipeline.NoTime, Key: string(key)}
}

// propJoinOp is one input row of the property test.
type propJoinOp struct {
	side    int
	k       string
	v       int64
	kind    string // "" (a plain record), +I, +U, -U or -D
	asFloat bool   // v is given as a float64 (a retraction of an int row)
}

func (o propJoinOp) record() pipeline.Record {
	field := "v"
	if o.side == sideRight {
		field = "w"
	}
	f := map[string]any{field: o.v}
	if o.asFloat {
		f[field] = float64(o.v)
	}
	if o.kind != "" {
		f[pipeline.OpField] = o.kind
	}
	return joinRec(o.k, f)
}

// rowJSON is the identity of an output row in the folded table: its JSON
// without _op.
func rowJSON(t testing.TB, f map[string]any) string {
	c := maps.Clone(f)
	delete(c, pipeline.OpField)
	b, err := json.Marshal(c)
	require.NoError(t, err)
	return string(b)
}

// multiset is a table: row -> count.
type multiset map[string]int

// fold applies changelog rows to the table and fails on a row taken back
// that the table does not hold.
func (m multiset) fold(t testing.TB, recs []pipeline.Record) {
	for _, r := range recs {
		id := rowJSON(t, r.Fields)
		switch r.Fields[pipeline.OpField] {
		case pipeline.OpInsert, pipeline.OpUpdate:
			m[id]++
		case pipeline.OpRetract, pipeline.OpDelete:
			require.Positive(t, m[id], "a retraction of a row that is not in the output: %s", id)
			if m[id]--; m[id] == 0 {
				delete(m, id)
			}
		default:
			t.Fatalf("an output row without a changelog kind: %v", r.Fields)
		}
	}
}

// sideRows are the rows a side holds: key -> v -> copies.
type sideRows map[string]map[int64]int

// referenceJoin joins the two sides' rows by nested loops, as the join's
// type says, into the table the changelog must fold to.
func referenceJoin(t testing.TB, typ joinType, rows [2]sideRows) multiset {
	out := multiset{}
	keys := map[string]bool{}
	for _, s := range rows {
		for k := range s {
			keys[k] = true
		}
	}
	add := func(f map[string]any, n int) {
		if n > 0 {
			out[rowJSON(t, f)] += n
		}
	}
	for k := range keys {
		left, right := rows[sideLeft][k], rows[sideRight][k]
		for v, nl := range left {
			for w, nr := range right {
				add(map[string]any{"k": k, "v": v, "w": w}, nl*nr)
			}
			if len(right) == 0 && typ.keepsUnmatched(sideLeft) {
				add(map[string]any{"k": k, "v": v}, nl)
			}
		}
		if len(left) == 0 && typ.keepsUnmatched(sideRight) {
			for w, nr := range right {
				add(map[string]any{"k": k, "w": w}, nr)
			}
		}
	}
	return out
}

// randomSide returns n random changes of one side's rows: inserts, and
// retractions of rows the side holds at that point, and the rows the side
// holds after them.
func randomSide(rng *rand.Rand, side, n int) ([]propJoinOp, sideRows) {
	rows := sideRows{}
	var ops []propJoinOp
	for range n {
		k := []string{"a", "b", "c"}[rng.IntN(3)]
		held := slices.Sorted(maps.Keys(rows[k]))
		if len(held) > 0 && rng.IntN(3) == 0 {
			v := held[rng.IntN(len(held))]
			ops = append(ops, propJoinOp{side: side, k: k, v: v, kind: []string{pipeline.OpRetract, pipeline.OpDelete}[rng.IntN(2)], asFloat: rng.IntN(2) == 0})
			if rows[k][v]--; rows[k][v] == 0 {
				delete(rows[k], v)
			}
			continue
		}
		v := rng.Int64N(3)
		ops = append(ops, propJoinOp{side: side, k: k, v: v, kind: []string{"", pipeline.OpInsert, pipeline.OpUpdate}[rng.IntN(3)]})
		if rows[k] == nil {
			rows[k] = map[int64]int{}
		}
		rows[k][v]++
	}
	for k, m := range rows {
		if len(m) == 0 {
			delete(rows, k)
		}
	}
	return ops, rows
}

// interleave merges the two sides' changes in a random order that keeps
// each side's own order.
func interleave(rng *rand.Rand, sides [2][]propJoinOp) []propJoinOp {
	var out []propJoinOp
	i := [2]int{}
	for i[0] < len(sides[0]) || i[1] < len(sides[1]) {
		s := rng.IntN(2)
		if i[s] == len(sides[s]) {
			s = 1 - s
		}
		out = append(out, sides[s][i[s]])
		i[s]++
	}
	return out
}

// runJoin feeds the changes to a new join, in batches of consecutive
// changes of one side (random sizes), restarting it at random points; it
// checks that the folded output is a table at every point (no retraction
// of a row it does not hold) and returns the final table.
func runJoin(t *testing.T, rng *rand.Rand, typ joinType, ops []propJoinOp) multiset {
	j := openRegular(t, &joinPlan{kind: joinRegular, typ: typ}, nil)
	table := multiset{}
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && ops[n].side == ops[0].side && rng.IntN(3) > 0 {
			n++
		}
		batch := make([]pipeline.Record, n)
		for i := range batch {
			batch[i] = ops[i].record()
		}
		table.fold(t, j.input(ops[0].side, batch...))
		ops = ops[n:]
		if rng.IntN(20) == 0 {
			j.restart()
		}
	}
	return table
}

// TestRegularJoinProperty runs random inserts and retractions (of rows
// present only) on both sides through every join type and checks that the
// changelog folds to the nested-loop join of the final rows of both sides,
// and that two arrival orders of the same changes fold to the same table.
func TestRegularJoinProperty(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 40
	}
	types := []string{"inner", "left", "right", "full"}
	for seed := range runs {
		name := types[seed%4]
		typ := joinTypes[name]
		t.Run(fmt.Sprintf("%d/%s", seed, name), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			var sides [2][]propJoinOp
			var rows [2]sideRows
			for s := range sides {
				sides[s], rows[s] = randomSide(rng, s, 5+rng.IntN(40))
			}
			want := referenceJoin(t, typ, rows)
			first := runJoin(t, rng, typ, interleave(rng, sides))
			require.Equal(t, want, first, "the folded output against the nested-loop join")
			second := runJoin(t, rng, typ, interleave(rng, sides))
			require.Equal(t, first, second, "two arrival orders")
		})
	}
}

// TestRegularJoinCleanup checks that the join deletes expired rows on its
// processing-time wake-up, not only hides them: the backend has nothing
// left to clean up after it.
func TestRegularJoinCleanup(t *testing.T) {
	j := openRegular(t, &joinPlan{kind: joinRegular, typ: joinLeft, ttl: 10 * time.Second}, nil)
	require.Equal(t, []int64{10_000}, j.wakes, "a cleanup ttl after Open, for restored rows")
	j.clock = 1000
	j.input(sideLeft, joinRec("a", map[string]any{"v": 1}), joinRec("b", map[string]any{"v": 2}))
	j.input(sideRight, joinRec("a", map[string]any{"w": 3}))
	j.clock = 10_000
	require.NoError(t, j.op.OnProcessingTime(j.clock, j.out))
	require.Equal(t, []int64{10_000, 20_000}, j.wakes, "rows were written since the first request: one more cleanup")
	j.clock = 20_000
	require.NoError(t, j.op.OnProcessingTime(j.clock, j.out))
	n, err := j.backend.Cleanup()
	require.NoError(t, err)
	require.Zero(t, n, "expired rows the join left behind")
	require.Equal(t, []int64{10_000, 20_000}, j.wakes, "nothing written since: no new request")
	require.Empty(t, j.out.records)
}

// TestRegularJoinRetractsStoredRow checks that a retraction takes back the
// rows the stored row joined, with its values as they were (an int), even
// when the retraction gives them in another type (a float).
func TestRegularJoinRetractsStoredRow(t *testing.T) {
	j := openRegular(t, &joinPlan{kind: joinRegular, typ: joinInner}, nil)
	j.input(sideLeft, joinRec("a", map[string]any{"v": int64(1)}))
	j.input(sideRight, joinRec("a", map[string]any{"w": int64(2)}))
	got := j.input(sideLeft, joinRec("a", map[string]any{"v": 1.0, pipeline.OpField: pipeline.OpDelete}))
	require.Len(t, got, 1)
	require.Equal(t, map[string]any{"k": "a", "v": int64(1), "w": int64(2), pipeline.OpField: pipeline.OpDelete}, got[0].Fields)
}

// TestRegularJoinRowID checks the row identity: field order and numeric
// types do not matter, nested maps and lists are compared by value, _op
// is left out, and a value a snapshot cannot hold is an error.
func TestRegularJoinRowID(t *testing.T) {
	j := newRegularJoin(&joinPlan{})
	id := func(f map[string]any) string {
		s, err := j.rowID(f)
		require.NoError(t, err)
		return s
	}
	a := id(map[string]any{"x": int64(1), "m": map[string]any{"p": []any{1, "q"}, "o": nil}, pipeline.OpField: "+I"})
	require.Equal(t, a, id(map[string]any{"m": map[string]any{"o": nil, "p": []any{1.0, "q"}}, "x": 1}))
	require.NotEqual(t, a, id(map[string]any{"m": map[string]any{"o": nil, "p": []any{"q", 1}}, "x": 1}))
	require.NotEqual(t, id(map[string]any{"x": "1"}), id(map[string]any{"x": 1}))
	require.NotEqual(t, id(map[string]any{"x": []any{"a", "b"}}), id(map[string]any{"x": []any{"ab"}}))
	_, err := j.rowID(map[string]any{"t": time.Second})
	require.ErrorContains(t, err, `field "t"`)
}

// TestRegularJoinSelectOp checks that a select field named _op is refused:
// the output's _op is the changelog kind.
func TestRegularJoinSelectOp(t *testing.T) {
	spec, err := loadSteps("  - id: s\n    join:\n      left: in\n      right: in\n      on: {left: k, right: k}\n      select: {_op: left.k}\n")
	require.NoError(t, err)
	op, err := spec.Steps[0].Config.NewOperator()
	require.NoError(t, err)
	err = op.Open(context.Background(), &pipeline.OperatorContext{SubtaskInfo: pipeline.SubtaskInfo{ID: "s"}})
	require.ErrorContains(t, err, "select field _op")
}

// BenchmarkRegularJoin joins two changelogs over 10,000 keys with a ttl:
// each event updates its key's row on one side (-U of the old row, +U of
// the new one, as a continuous aggregate emits), which takes back and
// re-adds its joined row. It reports input rows per second.
func BenchmarkRegularJoin(b *testing.B) {
	for _, typ := range []string{"inner", "left"} {
		b.Run(typ, func(b *testing.B) {
			const keys, batch = 10_000, 256
			plan := &joinPlan{kind: joinRegular, typ: joinTypes[typ], ttl: time.Hour}
			j := openRegular(b, plan, nil)
			names := make([]string, keys)
			encoded := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("key-%d", i)
				k, _ := pipeline.EncodeKey(nil, names[i])
				encoded[i] = string(k)
			}
			last := [2][]int64{make([]int64, keys), make([]int64, keys)}
			field := [2]string{"v", "w"}
			in := make([]pipeline.Record, 0, batch)
			rng := rand.New(rand.NewPCG(1, 2))
			row := func(side, k int, v int64, op string) pipeline.Record {
				return pipeline.Record{Fields: map[string]any{"k": names[k], field[side]: v, pipeline.OpField: op}, Time: pipeline.NoTime, Key: encoded[k]}
			}
			// Every key starts with a row on both sides.
			for side := range 2 {
				for k := range keys {
					j.input(side, row(side, k, 0, pipeline.OpInsert))
				}
			}
			rows := 0
			b.ResetTimer()
			start := time.Now()
			for n := 0; n < b.N; n += len(in) {
				side := (n / batch) % 2
				in = in[:0]
				for range batch / 2 {
					k := rng.IntN(keys)
					in = append(in, row(side, k, last[side][k], pipeline.OpRetract))
					last[side][k]++
					in = append(in, row(side, k, last[side][k], pipeline.OpUpdate))
				}
				rows += len(j.input(side, in...))
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			b.ReportMetric(float64(rows)/float64(b.N), "out/event")
		})
	}
}

// configs/joins_regular.yaml through the real runtime: the retract file
// and the upsert file both fold to the left join of the customers' totals
// with their names.
func TestRegularJoinConfig(t *testing.T) {
	out := t.TempDir()
	t.Setenv("EDDY_OUT", out)
	spec, err := pipeline.LoadFile(pipeline.Default, "../configs/joins_regular.yaml")
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	got := readOutputs(t, out)
	require.Len(t, got, 2)

	want := map[string]map[string]any{}
	names := []any{"Ann", "Bob", "Cy", "Di", nil}
	for i := range 60 {
		c := fmt.Sprintf("c%d", i%5)
		if want[c] == nil {
			want[c] = map[string]any{"customer": c, "name": names[i%5], "orders": 0.0, "spent": 0.0}
		}
		want[c]["orders"] = want[c]["orders"].(float64) + 1
		want[c]["spent"] = want[c]["spent"].(float64) + float64(i%7+1)
	}
	wantRows := multiset{}
	for _, row := range want {
		wantRows[rowJSON(t, row)]++
	}

	changes := got["customer_changes.jsonl"]
	folded := multiset{}
	folded.fold(t, asRecords(changes))
	require.Equal(t, wantRows, folded, "the retract file, folded")

	latest := map[any]map[string]any{}
	for _, row := range got["customer_latest.jsonl"] {
		switch row[pipeline.OpField] {
		case pipeline.OpInsert, pipeline.OpUpdate:
			latest[row["customer"]] = row
		case pipeline.OpDelete:
			delete(latest, row["customer"])
		default:
			t.Fatalf("the upsert file has %v", row)
		}
	}
	upserted := multiset{}
	for _, row := range latest {
		upserted[rowJSON(t, row)]++
	}
	require.Equal(t, wantRows, upserted, "the upsert file, the last row per customer")
	for _, row := range changes {
		require.Contains(t, []any{pipeline.OpInsert, pipeline.OpDelete}, row[pipeline.OpField], "a left join's rows are +I and -D: %v", row)
	}
}

// asRecords wraps rows read back from a file as records.
func asRecords(rows []map[string]any) []pipeline.Record {
	out := make([]pipeline.Record, len(rows))
	for i, f := range rows {
		out[i] = pipeline.NewRecord(f)
	}
	return out
}
