package operators

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	_ "github.com/eddy-stream/eddy/connectors/all" // file and generator, for the runtime tests
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// keyedHarness drives the operator of a keyed step "s" (key_by with an
// aggregate, dedupe) the way a task does: records carry the key the input
// edge computes, the operator gets a memory state backend, a fake clock and
// the watermarks the test gives.
type keyedHarness struct {
	t       testing.TB
	step    *pipeline.StepSpec
	op      pipeline.Operator
	keys    []*expr.Expr
	vm      expr.VM
	info    pipeline.SubtaskInfo
	metrics *pipeline.Metrics
	backend statestore.Backend
	dead    *collector
	now     int64 // the fake processing time
	wakeAt  int64 // the operator's latest WakeAt request
}

func newKeyedHarness(t testing.TB, steps string) *keyedHarness {
	return newKeyedHarnessRestored(t, steps)
}

// newKeyedHarnessRestored restores blobs into the backend before the
// operator opens, as the runtime does after a failure.
func newKeyedHarnessRestored(t testing.TB, steps string, blobs ...[]byte) *keyedHarness {
	t.Helper()
	return newKeyedHarnessOn(t, steps, func(o statestore.Options) (statestore.Backend, error) { return statestore.NewMemory(o) }, blobs...)
}

// newKeyedHarnessOn is newKeyedHarnessRestored on the backend that open
// returns.
func newKeyedHarnessOn(t testing.TB, steps string, open func(statestore.Options) (statestore.Backend, error), blobs ...[]byte) *keyedHarness {
	t.Helper()
	spec, err := loadSteps(steps)
	require.NoError(t, err)
	h := &keyedHarness{t: t, metrics: pipeline.NewMetrics(), dead: &collector{}, now: 1_000}
	for _, s := range spec.Steps {
		if s.ID == "s" {
			h.step = s
		}
	}
	require.NotNil(t, h.step, "no step with id s")
	ks, ok := h.step.Config.(pipeline.KeyedStep)
	require.True(t, ok, "step s is not keyed")
	h.keys = ks.KeyExprs(0)
	h.op, err = h.step.Config.NewOperator()
	require.NoError(t, err)
	h.backend, err = open(statestore.Options{
		KeyGroup:  func(key string) int { return pipeline.KeyGroup(key, 128) },
		KeyGroups: [2]int{0, 128},
		Clock:     func() int64 { return h.now },
	})
	require.NoError(t, err)
	if len(blobs) > 0 {
		require.NoError(t, h.backend.Restore(blobs...))
	}
	h.info = pipeline.SubtaskInfo{ID: "s", Parallelism: 1, MaxParallelism: 128, PipelineName: spec.Name, Logger: slog.Default(), Metrics: h.metrics}
	oc := &pipeline.OperatorContext{
		SubtaskInfo: h.info,
		Errors:      pipeline.NewErrorHandler(h.info, h.step.OnError, h.dead),
		Side: func(name string) pipeline.Emitter {
			t.Errorf("unexpected side output %q", name)
			return &collector{}
		},
		Now:        func() int64 { return h.now },
		WakeAt:     func(at int64) { h.wakeAt = at },
		KeyedState: func() (statestore.Backend, error) { return h.backend, nil },
	}
	require.NoError(t, h.op.Open(context.Background(), oc))
	t.Cleanup(func() {
		require.NoError(t, h.op.Close())
		require.NoError(t, h.backend.Close())
	})
	return h
}

// rec returns a record with event time ts (pipeline.NoTime for none) and
// the key the step's input edge would compute.
func (h *keyedHarness) rec(ts int64, f fields) pipeline.Record {
	h.t.Helper()
	vals := make([]any, len(h.keys))
	for i, e := range h.keys {
		v, err := h.vm.Eval(e, f)
		require.NoError(h.t, err)
		vals[i] = v
	}
	var key []byte
	var err error
	if len(vals) == 1 {
		key, err = pipeline.EncodeKey(nil, vals[0])
	} else {
		key, err = pipeline.EncodeKey(nil, vals)
	}
	require.NoError(h.t, err)
	return pipeline.Record{Fields: f, Time: ts, Key: string(key)}
}

// process runs one batch and returns what the operator emitted; it checks
// the Operator contract (one emit per batch at most, never empty) and that
// the state backend recorded no failure.
func (h *keyedHarness) process(in ...pipeline.Record) ([]pipeline.Record, error) {
	h.t.Helper()
	out := &collector{}
	err := h.op.Process(in, out)
	require.LessOrEqual(h.t, out.emits, 1, "an operator emits at most once per batch")
	if len(out.records) == 0 {
		require.Zero(h.t, out.emits, "an operator does not emit an empty batch")
	}
	require.NoError(h.t, h.backend.Err())
	return out.records, err
}

// mustProcess is process without an error.
func (h *keyedHarness) mustProcess(in ...pipeline.Record) []pipeline.Record {
	h.t.Helper()
	out, err := h.process(in...)
	require.NoError(h.t, err)
	return out
}

// watermark advances event time and returns what the operator emitted.
func (h *keyedHarness) watermark(wm int64) []pipeline.Record {
	h.t.Helper()
	wmh, ok := h.op.(pipeline.WatermarkHandler)
	require.True(h.t, ok, "the operator does not take watermarks")
	out := &collector{}
	require.NoError(h.t, wmh.OnWatermark(wm, out))
	return out.records
}

// errorCount returns the record-errors counter of the step's policy.
func (h *keyedHarness) errorCount() float64 {
	return pipeline.CounterValue(h.metrics.RecordErrors(h.info, h.step.OnError))
}

// keysIn returns the number of keys that hold state.
func (h *keyedHarness) keysIn(state string) int {
	h.t.Helper()
	s, err := h.backend.State(state)
	require.NoError(h.t, err)
	n := 0
	for g := range 128 {
		for range s.Keys(g) {
			n++
		}
	}
	return n
}

// snapshot encodes the backend's state as a restore would read it.
func (h *keyedHarness) snapshot() [][]byte {
	h.t.Helper()
	snap, err := h.backend.Snapshot()
	require.NoError(h.t, err)
	return encodeSnapshot(h.t, snap)
}

func encodeSnapshot(t testing.TB, snap statestore.Snapshot) [][]byte {
	t.Helper()
	defer snap.Release()
	_, blobs, err := statestoretest.Blobs(snap)
	require.NoError(t, err)
	return blobs
}

// row builds an expected changelog row.
func row(ts int64, key string, op string, f fields) pipeline.Record {
	f[pipeline.OpField] = op
	return pipeline.Record{Fields: f, Time: ts, Key: key}
}

func TestContinuousAggregateChangelog(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {n: count(), total: sum(x)}"))
	a1, b1, a2 := h.rec(1, fields{"id": "a", "x": 1}), h.rec(2, fields{"id": "b", "x": 10}), h.rec(3, fields{"id": "a", "x": 2})
	ka, kb := a1.Key, b1.Key
	out := h.mustProcess(a1, b1, a2)
	require.Equal(t, []pipeline.Record{
		row(1, ka, "+I", fields{"id": "a", "n": int64(1), "total": int64(1)}),
		row(2, kb, "+I", fields{"id": "b", "n": int64(1), "total": int64(10)}),
		row(3, ka, "-U", fields{"id": "a", "n": int64(1), "total": int64(1)}),
		row(3, ka, "+U", fields{"id": "a", "n": int64(2), "total": int64(3)}),
	}, out)

	// The next batch goes on from the state.
	out = h.mustProcess(h.rec(4, fields{"id": "b", "x": 5}), h.rec(pipeline.NoTime, fields{"id": "a", "x": 3.5}))
	require.Equal(t, []pipeline.Record{
		row(4, kb, "-U", fields{"id": "b", "n": int64(1), "total": int64(10)}),
		row(4, kb, "+U", fields{"id": "b", "n": int64(2), "total": int64(15)}),
		row(pipeline.NoTime, ka, "-U", fields{"id": "a", "n": int64(2), "total": int64(3)}),
		row(pipeline.NoTime, ka, "+U", fields{"id": "a", "n": int64(3), "total": 6.5}),
	}, out)
	require.Equal(t, 2, h.keysIn(continuousState))
	require.Zero(t, h.errorCount())
}

// An update that changes no aggregate emits nothing (Flink's group
// aggregation without state TTL does the same).
func TestContinuousAggregateUnchanged(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {total: sum(x), hi: max(x), xs: count_distinct(x)}"))
	out := h.mustProcess(
		h.rec(1, fields{"id": "a", "x": 2}),
		h.rec(2, fields{"id": "a", "x": 0}), // sum and max stay, count_distinct changes
		h.rec(3, fields{"id": "a", "x": 0}), // nothing changes
		h.rec(4, fields{"id": "a"}),         // a null x: skipped by every aggregate
	)
	ka := out[0].Key
	require.Equal(t, []pipeline.Record{
		row(1, ka, "+I", fields{"id": "a", "total": int64(2), "hi": 2, "xs": int64(1)}),
		row(2, ka, "-U", fields{"id": "a", "total": int64(2), "hi": 2, "xs": int64(1)}),
		row(2, ka, "+U", fields{"id": "a", "total": int64(2), "hi": 2, "xs": int64(2)}),
	}, out)
}

func TestContinuousAggregateKeyFields(t *testing.T) {
	for _, tc := range []struct {
		keyBy string
		in    fields
		want  fields // the key fields of the row
	}{
		{"id", fields{"id": "a"}, fields{"id": "a"}},
		{"id", fields{"id": 3.0}, fields{"id": int64(3)}}, // the canonical key: 3.0 and 3 are one key
		{"lower(id)", fields{"id": "A"}, fields{"key": "a"}},
		{"[region, id]", fields{"region": "eu", "id": 7}, fields{"region": "eu", "id": int64(7)}},
		{"[region, 'id % 2']", fields{"region": "eu", "id": 7}, fields{"region": "eu", "key_2": int64(1)}},
		{"['upper(region)', 'id % 2']", fields{"region": "eu", "id": 7}, fields{"key": "EU", "key_2": int64(1)}},
		{"[region, 'nil']", fields{"region": "eu"}, fields{"region": "eu", "key_2": nil}},
	} {
		t.Run(tc.keyBy, func(t *testing.T) {
			h := newKeyedHarness(t, stepYAML("key_by: "+tc.keyBy+"\n    aggregate: {n: count()}"))
			r := h.rec(5, tc.in)
			out := h.mustProcess(r)
			want := fields{"n": int64(1)}
			for k, v := range tc.want {
				want[k] = v
			}
			require.Equal(t, []pipeline.Record{row(5, r.Key, "+I", want)}, out)
		})
	}
}

// Composite keys: each combination of values is its own row.
func TestContinuousAggregateCompositeKey(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: [region, id]\n    aggregate: {n: count()}"))
	var got []string
	for _, f := range []fields{
		{"region": "eu", "id": 1}, {"region": "us", "id": 1}, {"region": "eu", "id": 2}, {"region": "eu", "id": 1},
	} {
		for _, r := range h.mustProcess(h.rec(1, f)) {
			got = append(got, fmt.Sprintf("%s %v/%v n=%v", r.Fields["_op"], r.Fields["region"], r.Fields["id"], r.Fields["n"]))
		}
	}
	require.Equal(t, []string{"+I eu/1 n=1", "+I us/1 n=1", "+I eu/2 n=1", "-U eu/1 n=1", "+U eu/1 n=2"}, got)
	require.Equal(t, 3, h.keysIn(continuousState))
}

// A record that an aggregate cannot take goes to on_error; the row stays as
// it was, and a key whose first record failed gets no row.
func TestContinuousAggregateBadInput(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {n: count(), total: sum(x)}\n    on_error: dead_letter"))
	bad := h.rec(2, fields{"id": "a", "x": "12"})
	out := h.mustProcess(
		h.rec(1, fields{"id": "a", "x": 1}),
		bad,
		h.rec(3, fields{"id": "b", "x": "x"}),
		h.rec(4, fields{"id": "a", "x": 2}),
		h.rec(5, fields{"id": "b", "x": 5}),
	)
	var got []string
	for _, r := range out {
		got = append(got, fmt.Sprintf("%s %s n=%v total=%v", r.Fields["_op"], r.Fields["id"], r.Fields["n"], r.Fields["total"]))
	}
	require.Equal(t, []string{"+I a n=1 total=1", "-U a n=1 total=1", "+U a n=2 total=3", "+I b n=1 total=5"}, got)
	require.Equal(t, float64(2), h.errorCount())
	require.Len(t, h.dead.records, 2)
	dl := h.dead.records[0]
	require.Equal(t, "s", dl.Fields["step"])
	require.Equal(t, fields{"id": "a", "x": "12"}, dl.Fields["record"])
	require.Contains(t, dl.Fields["error"], "total")
	require.Contains(t, dl.Fields["error"], "sum(x)")
	require.Equal(t, int64(2), dl.Time)
}

// An aggregate input that is NaN or infinite (a division by zero) fails the
// record instead of poisoning the key's aggregate for good.
func TestContinuousAggregateNonFiniteInput(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate:\n      total: sum(a / b)\n      last: reduce(a / b, 0)\n    on_error: dead_letter"))
	out := h.mustProcess(
		h.rec(1, fields{"id": "a", "a": 1, "b": 2}),
		h.rec(2, fields{"id": "a", "a": 1, "b": 0}),
		h.rec(3, fields{"id": "a", "a": 3, "b": 2}),
	)
	var got []string
	for _, r := range out {
		got = append(got, fmt.Sprintf("%s total=%v last=%v", r.Fields["_op"], r.Fields["total"], r.Fields["last"]))
	}
	require.Equal(t, []string{"+I total=0.5 last=0.5", "-U total=0.5 last=0.5", "+U total=2 last=1.5"}, got)
	require.Len(t, h.dead.records, 1)
	require.Equal(t, fields{"id": "a", "a": 1, "b": 0}, h.dead.records[0].Fields["record"])
	require.Contains(t, h.dead.records[0].Fields["error"], "aggregate total: sum(a / b): the result is +Inf, not a finite number")
}

// on_error: fail emits the changes of the records before the failing one,
// then fails.
func TestContinuousAggregateBadInputFails(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {total: sum(x)}\n    on_error: fail"))
	out, err := h.process(h.rec(1, fields{"id": "a", "x": 1}), h.rec(2, fields{"id": "a", "x": true}))
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
	require.Len(t, out, 1)
	require.Equal(t, pipeline.OpInsert, out[0].Fields[pipeline.OpField])
	require.EqualValues(t, 1, out[0].Fields["total"])
}

// A changelog input (an upstream continuous aggregate) is applied: -U and -D
// rows take their record back out, and a key whose last record went is
// deleted.
func TestContinuousAggregateOverChangelog(t *testing.T) {
	// How many keys upstream have each total: a count per total.
	h := newKeyedHarness(t, stepYAML("key_by: total\n    aggregate: {keys: count(), ids: collect(id)}"))
	in := func(op string, id string, total int) pipeline.Record {
		return h.rec(1, fields{"id": id, "total": total, "_op": op})
	}
	var got []string
	for _, r := range h.mustProcess(
		in("+I", "a", 1), in("+I", "b", 1), // two keys with total 1
		in("-U", "a", 1), in("+U", "a", 3), // a moves to 3
		in("-U", "b", 1), in("+U", "b", 3), // b too: total 1 is gone
		in("-D", "a", 3),
	) {
		got = append(got, fmt.Sprintf("%s %v keys=%v ids=%v", r.Fields["_op"], r.Fields["total"], r.Fields["keys"], r.Fields["ids"]))
	}
	require.Equal(t, []string{
		"+I 1 keys=1 ids=[a]",
		"-U 1 keys=1 ids=[a]", "+U 1 keys=2 ids=[a b]",
		"-U 1 keys=2 ids=[a b]", "+U 1 keys=1 ids=[b]",
		"+I 3 keys=1 ids=[a]",
		"-D 1 keys=1 ids=[b]",
		"-U 3 keys=1 ids=[a]", "+U 3 keys=2 ids=[a b]",
		"-U 3 keys=2 ids=[a b]", "+U 3 keys=1 ids=[b]",
	}, got)
	require.Equal(t, 1, h.keysIn(continuousState))
	require.Zero(t, h.errorCount())
}

// Changelog input that cannot be applied fails the record.
func TestContinuousAggregateChangelogErrors(t *testing.T) {
	for _, tc := range []struct {
		name, agg string
		in        fields
		err       string
	}{
		{"unknown op", "n: count()", fields{"id": "a", "_op": "+X"}, `bad changelog kind: _op is "+X"`},
		{"op not a string", "n: count()", fields{"id": "a", "_op": 1}, `bad changelog kind: _op is a int`},
		{"retract an unknown key", "n: count()", fields{"id": "b", "_op": "-U"}, `retraction of a key that holds no row`},
		{"not retractable", "n: count(), hi: max(x)", fields{"id": "a", "x": 1, "_op": "-D"}, `aggregate cannot be retracted`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {"+tc.agg+"}\n    on_error: dead_letter"))
			first := h.mustProcess(h.rec(1, fields{"id": "a", "x": 1}))
			require.Len(t, first, 1)
			out := h.mustProcess(h.rec(2, tc.in))
			require.Empty(t, out)
			require.Len(t, h.dead.records, 1)
			require.Contains(t, h.dead.records[0].Fields["error"], tc.err)
			// The row is as before.
			out = h.mustProcess(h.rec(3, fields{"id": "a", "x": 1}))
			want := first[0].Fields
			want["_op"] = "-U"
			require.Equal(t, want, out[0].Fields)
		})
	}
}

// The rows live in the keyed state backend: a snapshot taken between two
// updates restores exactly the rows it saw (copy-on-write keeps the
// snapshot's rows from the later updates), and the restored operator goes on
// from them, whatever the aggregates hold (collect, reduce without merge).
func TestContinuousAggregateSnapshotRestore(t *testing.T) {
	step := stepYAML("key_by: id\n    aggregate: {n: count(), total: sum(x), xs: collect(x), prod: 'reduce(acc * x, 1)', hi: max(x)}")
	h := newKeyedHarness(t, step)
	h.mustProcess(h.rec(1, fields{"id": "a", "x": 2}), h.rec(2, fields{"id": "b", "x": 3}), h.rec(3, fields{"id": "a", "x": 4}))
	snap, err := h.backend.Snapshot()
	require.NoError(t, err)
	// Updates after the snapshot copy the rows they change.
	h.mustProcess(h.rec(4, fields{"id": "a", "x": 5}), h.rec(5, fields{"id": "c", "x": 1}))
	blobs := encodeSnapshot(t, snap)

	r := newKeyedHarnessRestored(t, step, blobs...)
	out := r.mustProcess(r.rec(6, fields{"id": "a", "x": 10}), r.rec(7, fields{"id": "c", "x": 1}))
	require.Equal(t, []pipeline.Record{
		row(6, out[0].Key, "-U", fields{"id": "a", "n": int64(2), "total": int64(6), "xs": []any{2, 4}, "prod": 8, "hi": 4}),
		row(6, out[0].Key, "+U", fields{"id": "a", "n": int64(3), "total": int64(16), "xs": []any{2, 4, 10}, "prod": 80, "hi": 10}),
		row(7, out[2].Key, "+I", fields{"id": "c", "n": int64(1), "total": int64(1), "xs": []any{1}, "prod": 1, "hi": 1}),
	}, out)
	require.Equal(t, 3, r.keysIn(continuousState))

	// The live operator went on too.
	out = h.mustProcess(h.rec(8, fields{"id": "a", "x": 1}))
	require.Equal(t, fields{"id": "a", "n": int64(4), "total": int64(12), "xs": []any{2, 4, 5, 1}, "prod": 40, "hi": 5, "_op": "+U"}, out[1].Fields)

	// A snapshot of restored rows that were never touched keeps them as they were.
	r = newKeyedHarnessRestored(t, step, blobs...)
	again := r.snapshot()
	r2 := newKeyedHarnessRestored(t, step, again...)
	out = r2.mustProcess(r2.rec(9, fields{"id": "b", "x": 1}))
	require.Equal(t, fields{"id": "b", "n": int64(1), "total": int64(3), "xs": []any{3}, "prod": 3, "hi": 3, "_op": "-U"}, out[0].Fields)
}

// A restore into different aggregates fails loudly instead of mixing rows.
func TestContinuousAggregateRestoreMismatch(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {n: count()}"))
	h.mustProcess(h.rec(1, fields{"id": "a"}))
	// Whatever on_error says: the records are not at fault.
	r := newKeyedHarnessRestored(t, stepYAML("key_by: id\n    aggregate: {total: sum(x)}\n    on_error: skip"), h.snapshot()...)
	_, err := r.process(r.rec(2, fields{"id": "a", "x": 1}))
	require.ErrorIs(t, err, agg.ErrMismatch)
	require.EqualError(t, err, "restore the row of a continuous aggregate: decode aggregate total: "+
		"aggregate state does not match the specs: the snapshot holds count, the step declares sum")
	require.Zero(t, r.errorCount())
}

func TestContinuousAggregateOutputNames(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{"key_by: id\naggregate: {n: count()}", ""},
		{"key_by: id\naggregate: {id: count()}", `aggregate.id: the output row already has the key field "id"; name the aggregate otherwise`},
		{"key_by: [a, 'b + 1']\naggregate: {key_2: count()}", `aggregate.key_2: the output row already has the key field "key_2"; name the aggregate otherwise`},
		{"key_by: id\naggregate: {_op: count()}", `aggregate._op: _op is the changelog kind of every output row; name the aggregate otherwise`},
	} {
		var c KeyByConfig
		require.NoError(t, yaml.Unmarshal([]byte(tc.yaml), &c))
		err := validateContinuousAggregate(&c)
		if tc.want == "" {
			require.NoError(t, err)
			continue
		}
		var fe *pipeline.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, tc.want, fe.Key+": "+fe.Msg)
	}
}

// runPipeline loads a pipeline file from text, runs it to the end in the
// real runtime with the registered components (connectors/all) and returns
// the JSON rows of each file under out, by file name. ${OUT} in the text is
// the output directory.
func runPipeline(t *testing.T, text string) map[string][]map[string]any {
	t.Helper()
	out := t.TempDir()
	t.Setenv("OUT", out)
	spec, err := pipeline.Load(pipeline.Default, "t.yaml", []byte(text))
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	return readOutputs(t, out)
}

func readOutputs(t *testing.T, dir string) map[string][]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	require.NoError(t, err)
	got := map[string][]map[string]any{}
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		rows := []map[string]any{}
		for sc.Scan() {
			var m map[string]any
			require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
			rows = append(rows, m)
		}
		require.NoError(t, sc.Err())
		require.NoError(t, fh.Close())
		got[filepath.Base(f)] = rows
	}
	return got
}

// describeRows renders changelog rows compactly: "_op k=v ..." with the
// listed fields.
func describeRows(rows []map[string]any, names ...string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		var b strings.Builder
		b.WriteString(fmt.Sprint(r[pipeline.OpField]))
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%v", n, r[n])
		}
		out[i] = b.String()
	}
	return out
}

// Through the real runtime: a retract sink writes every row, an upsert sink
// the same rows without the retractions.
func TestContinuousAggregateRuntimeSinks(t *testing.T) {
	got := runPipeline(t, `version: 1
name: totals
parallelism: 1
sources:
  - id: in
    type: generator
    count: 6
    fields:
      k: '["a", "b", "a"][i % 3]'
      x: i + 1
steps:
  - id: totals
    key_by: k
    aggregate:
      n: count()
      total: sum(x)
sinks:
  - id: retract
    from: totals
    type: file
    path: ${OUT}/retract.jsonl
    changelog: retract
  - id: upsert
    from: totals
    type: file
    path: ${OUT}/upsert.jsonl
    changelog: upsert
`)
	// x: a=1, b=2, a=3, a=4, b=5, a=6
	require.Equal(t, []string{
		"+I k=a n=1 total=1",
		"+I k=b n=1 total=2",
		"-U k=a n=1 total=1", "+U k=a n=2 total=4",
		"-U k=a n=2 total=4", "+U k=a n=3 total=8",
		"-U k=b n=1 total=2", "+U k=b n=2 total=7",
		"-U k=a n=3 total=8", "+U k=a n=4 total=14",
	}, describeRows(got["retract.jsonl"], "k", "n", "total"))
	require.Equal(t, []string{
		"+I k=a n=1 total=1",
		"+I k=b n=1 total=2",
		"+U k=a n=2 total=4",
		"+U k=a n=3 total=8",
		"+U k=b n=2 total=7",
		"+U k=a n=4 total=14",
	}, describeRows(got["upsert.jsonl"], "k", "n", "total"))
	// Rows hold the key, the aggregates and _op, nothing else.
	for _, r := range got["retract.jsonl"] {
		require.Len(t, r, 4)
	}
}

// Parallelism 2: the input is hash-partitioned by the key, so every key's
// rows come from one subtask, in order: one +I per key, then a -U/+U pair
// per record, each -U retracting the row before it.
func TestContinuousAggregateRuntimeParallel(t *testing.T) {
	const n, keys = 600, 17
	got := runPipeline(t, fmt.Sprintf(`version: 1
name: counts
parallelism: 2
sources:
  - id: in
    type: generator
    count: %d
    fields:
      k: i %% %d
steps:
  - id: counts
    key_by: k
    aggregate:
      n: count()
      subtask_sum: sum(k)
    on_error: fail
sinks:
  - id: out
    type: file
    parallelism: 1
    path: ${OUT}/counts.jsonl
`, n, keys))
	rows := got["counts.jsonl"]
	require.Len(t, rows, 2*n-keys)
	last := map[float64]float64{} // key -> n of its latest +I/+U row
	for _, r := range rows {
		k, cnt := r["k"].(float64), r["n"].(float64)
		require.Equal(t, k*cnt, r["subtask_sum"])
		prev, seen := last[k]
		switch r[pipeline.OpField] {
		case "+I":
			require.False(t, seen, "a second +I for key %v", k)
			require.Equal(t, 1.0, cnt)
			last[k] = cnt
		case "-U":
			require.True(t, seen)
			require.Equal(t, prev, cnt, "the -U of key %v retracts its latest row", k)
			last[k] = -cnt // a +U must follow
		case "+U":
			require.Equal(t, -prev+1, cnt, "key %v counts one more", k)
			last[k] = cnt
		}
	}
	require.Len(t, last, keys)
	total := 0.0
	for _, c := range last {
		total += c
	}
	require.Equal(t, float64(n), total)
}

// Bad input through the runtime goes to the step's errors stream.
func TestContinuousAggregateRuntimeDeadLetter(t *testing.T) {
	got := runPipeline(t, `version: 1
name: dl
parallelism: 1
sources:
  - id: in
    type: generator
    count: 4
    fields:
      k: '"a"'
      x: 'i == 2 ? "two" : i'
steps:
  - id: totals
    key_by: k
    aggregate:
      total: sum(x)
    on_error: dead_letter
sinks:
  - id: out
    type: file
    path: ${OUT}/out.jsonl
  - id: bad
    from: totals.errors
    type: file
    path: ${OUT}/bad.jsonl
`)
	require.Equal(t, []string{"+I total=0", "-U total=0", "+U total=1", "-U total=1", "+U total=4"},
		describeRows(got["out.jsonl"], "total"))
	require.Len(t, got["bad.jsonl"], 1)
	require.Equal(t, map[string]any{"k": "a", "x": "two"}, got["bad.jsonl"][0]["record"])
}

// BenchmarkContinuousAggregate folds records of 10,000 keys into count() and
// sum(x), and with last(s) of a string as well, in batches of 1024: the
// steady state of a busy continuous aggregate (every record updates a row
// and emits a -U/+U pair).
func BenchmarkContinuousAggregate(b *testing.B) {
	for _, c := range []struct{ name, aggregate string }{
		{"count,sum", "{n: count(), total: sum(x)}"},
		{"count,sum,last", "{n: count(), total: sum(x), s: last(s)}"},
	} {
		b.Run(c.name, func(b *testing.B) { benchContinuous(b, c.aggregate) })
	}
}

func benchContinuous(b *testing.B, aggregate string) {
	const keys = 10_000
	h := newKeyedHarness(b, stepYAML("key_by: id\n    aggregate: "+aggregate))
	all := make([]pipeline.Record, keys)
	for i := range all {
		all[i] = h.rec(int64(i), fields{"id": fmt.Sprintf("sensor-%d", i), "x": i % 100, "s": fmt.Sprintf("status-%d", i%7)})
	}
	batch := make([]pipeline.Record, benchBatch)
	discard := pipeline.EmitterFunc(func([]pipeline.Record) error { return nil })
	next := 0
	run := func() {
		for i := range batch {
			batch[i] = all[next]
			if next++; next == keys {
				next = 0
			}
		}
		if err := h.op.Process(batch, discard); err != nil {
			b.Fatal(err)
		}
	}
	for range keys / benchBatch * 2 { // every key has a row
		run()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchBatch), "ns/record")
}

// Every example of docs/changelog.md loads, after a generator source.
func TestChangelogDocExamplesLoad(t *testing.T) {
	doc, err := os.ReadFile("../docs/changelog.md")
	require.NoError(t, err)
	blocks := yamlBlock.FindAllStringSubmatch(string(doc), -1)
	require.Len(t, blocks, 4)
	for _, b := range blocks {
		text := "version: 1\nname: t\nsources:\n  - id: in\n    type: generator\n    count: 1\n    fields: {x: i}\n" + b[1]
		if !strings.Contains(b[1], "\nsinks:") {
			text += "sinks:\n  - id: out\n    type: stdout\n"
		}
		_, err := pipeline.Load(pipeline.Default, "changelog.md", []byte(text))
		require.NoError(t, err, "example:\n%s", b[1])
	}
}

// aggRow.AppendCBOR appends exactly what MarshalCBOR returns, for a live
// row and for a restored one still in its encoding.
func TestAggRowAppendCBOR(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("key_by: id\n    aggregate: {n: count(), xs: collect(x), hi: max(x)}"))
	row := &aggRow{row: agg.NewAccs(h.op.(*continuousOp).specs)}
	for _, x := range []any{2, 7, -1} {
		require.NoError(t, row.row.Add(&h.vm, map[string]any{"id": "a", "x": x}))
	}
	want, err := row.MarshalCBOR()
	require.NoError(t, err)
	require.Greater(t, len(want), 8, "a row with values")
	for _, r := range []*aggRow{row, {raw: want}} {
		got, err := r.AppendCBOR([]byte{0xAA})
		require.NoError(t, err)
		require.Equal(t, append([]byte{0xAA}, want...), got)
	}
}
