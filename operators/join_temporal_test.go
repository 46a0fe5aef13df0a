package operators

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// temporalYAML is a temporal join of type typ on field k, whose output
// names the left record and the version it joined.
func temporalYAML(typ string) string {
	return joinYAML("      on: {left: k, right: k}\n      type: "+typ+"\n      temporal: {}\n"+
		"      select:\n        id: left.id\n        v: right.v\n", "")
}

// temporalRig drives one temporal join operator on a backend it can
// snapshot and restore, as the runtime does at a checkpoint and a restart.
type temporalRig struct {
	t       testing.TB
	cfg     pipeline.StepConfig
	info    pipeline.SubtaskInfo
	backend statestore.Backend
	op      *temporalJoin
	out     collector
	late    collector
}

func newTemporalRig(t testing.TB, yaml string) *temporalRig {
	spec, err := loadSteps(yaml)
	require.NoError(t, err)
	st := spec.Steps[0]
	r := &temporalRig{t: t, cfg: st.Config, info: pipeline.SubtaskInfo{ID: st.ID, Parallelism: 1, MaxParallelism: 128,
		PipelineName: spec.Name, Logger: slog.Default(), Metrics: pipeline.NewMetrics()}}
	r.open(nil)
	return r
}

// open opens a new operator on a new memory backend restored from blobs.
func (r *temporalRig) open(blobs [][]byte) {
	b, err := statestore.NewMemory(statestore.Options{
		KeyGroup:  func(key string) int { return pipeline.KeyGroup(key, 128) },
		KeyGroups: [2]int{0, 128},
	})
	require.NoError(r.t, err)
	require.NoError(r.t, b.Restore(blobs...))
	op, err := r.cfg.NewOperator()
	require.NoError(r.t, err)
	oc := &pipeline.OperatorContext{SubtaskInfo: r.info, KeyedState: func() (statestore.Backend, error) { return b, nil },
		Side: func(string) pipeline.Emitter { return &r.late }}
	require.NoError(r.t, op.Open(context.Background(), oc))
	if r.op != nil {
		require.NoError(r.t, r.op.Close())
		require.NoError(r.t, r.backend.Close())
	}
	r.op, r.backend = op.(*temporalJoin), b
}

// restart snapshots the backend and restores it into a new operator.
func (r *temporalRig) restart() {
	snap, err := r.backend.Snapshot()
	require.NoError(r.t, err)
	_, blobs, err := statestoretest.Blobs(snap)
	require.NoError(r.t, err)
	snap.Release()
	r.open(blobs)
}

func (r *temporalRig) close() {
	require.NoError(r.t, r.op.Close())
	require.NoError(r.t, r.backend.Close())
}

// tjEvent is a record of the property test: a left record (id) or a
// version of key k (v; del: a -D row, retract: a -U row) at time ts.
type tjEvent struct {
	side    int
	k       string
	id      int
	v       int
	ts      int64
	del     bool
	retract bool
}

// record returns the event as the runtime hands it to the join, keyed.
func (e tjEvent) record(t testing.TB) pipeline.Record {
	f := map[string]any{"k": e.k}
	if e.side == sideLeft {
		f["id"] = int64(e.id)
	} else {
		f["v"] = int64(e.v)
		switch {
		case e.del:
			f[pipeline.OpField] = pipeline.OpDelete
		case e.retract:
			f[pipeline.OpField] = pipeline.OpRetract
		}
	}
	key, err := pipeline.EncodeKey(nil, e.k)
	require.NoError(t, err)
	return pipeline.Record{Fields: f, Time: e.ts, Key: string(key)}
}

// randomTemporalInput returns left records and versions of a few keys:
// per key, versions at distinct times (some deletes, some -U rows, which
// must change nothing), and left records at any time, some equal to a
// version's.
func randomTemporalInput(rng *rand.Rand) []tjEvent {
	var evs []tjEvent
	keys := 1 + rng.IntN(4)
	id := 0
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		times := rng.Perm(60)[:rng.IntN(8)]
		for i, t := range times {
			e := tjEvent{side: sideRight, k: key, v: 100*k + i, ts: int64(t) * 10}
			switch rng.IntN(6) {
			case 0:
				e.del = true
			case 1:
				// A -U row of any time, before or after the +U.
				evs = append(evs, tjEvent{side: sideRight, k: key, v: -1, ts: int64(rng.IntN(600)), retract: true})
			}
			evs = append(evs, e)
		}
		for range rng.IntN(10) {
			ts := int64(rng.IntN(650))
			if len(times) > 0 && rng.IntN(3) == 0 {
				ts = int64(times[rng.IntN(len(times))]) * 10 // equal to a version's time
			}
			evs = append(evs, tjEvent{side: sideLeft, k: key, id: id, ts: ts})
			id++
		}
	}
	return evs
}

// temporalReference joins by definition: each left record with the
// version of its key valid at its time, found by scanning every version
// of the key: the one with the greatest time at or before the record's,
// unless it is a delete. Rows are "id=v" ("id=nil" for a left join's
// unmatched rows) with the output time.
func temporalReference(evs []tjEvent, typ joinType) []string {
	out := []string{}
	for _, l := range evs {
		if l.side != sideLeft {
			continue
		}
		var best *tjEvent
		for i := range evs {
			r := &evs[i]
			if r.side == sideRight && !r.retract && r.k == l.k && r.ts <= l.ts && (best == nil || r.ts > best.ts) {
				best = r
			}
		}
		switch {
		case best != nil && !best.del:
			out = append(out, fmt.Sprintf("%d=%d@%d", l.id, best.v, l.ts))
		case typ == joinLeft:
			out = append(out, fmt.Sprintf("%d=nil@%d", l.id, l.ts))
		}
	}
	slices.Sort(out)
	return out
}

// temporalRows renders the operator's output as temporalReference does.
func temporalRows(recs []pipeline.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		v := "nil"
		if r.Fields["v"] != nil {
			v = fmt.Sprint(r.Fields["v"])
		}
		out = append(out, fmt.Sprintf("%v=%s@%d", r.Fields["id"], v, r.Time))
	}
	slices.Sort(out)
	return out
}

// runTemporal feeds evs to a new operator in their order, in batches of
// one side, with watermarks that make no record late (the least time still
// to come, less 1) and restarts at random points, then the final
// watermark. After each watermark it checks that state is pruned: per
// key, no left record the watermark reached, and at most one version at
// or before it, never a delete. It returns the output.
func runTemporal(t *testing.T, rng *rand.Rand, yaml string, evs []tjEvent) []pipeline.Record {
	r := newTemporalRig(t, yaml)
	defer r.close()
	wm := pipeline.MinWatermark
	for i := 0; i < len(evs); {
		n := 1
		for i+n < len(evs) && evs[i+n].side == evs[i].side && rng.IntN(3) > 0 {
			n++
		}
		batch := make([]pipeline.Record, n)
		for j := range n {
			batch[j] = evs[i+j].record(t)
		}
		require.NoError(t, r.op.ProcessInput(evs[i].side, batch, &r.out))
		i += n
		switch rng.IntN(4) {
		case 0:
			next := pipeline.MaxWatermark
			for _, e := range evs[i:] {
				next = min(next, e.ts-1)
			}
			if next > wm {
				wm = next
				require.NoError(t, r.op.OnWatermark(wm, &r.out))
				checkTemporalPruned(t, r.op, evs, wm)
			}
		case 1:
			r.restart()
			// The watermark starts over, as after a restore.
			wm = pipeline.MinWatermark
		}
	}
	require.NoError(t, r.op.OnWatermark(pipeline.MaxWatermark, &r.out))
	require.NoError(t, r.op.Finish(&r.out))
	require.Zero(t, temporalStateEntries(r), "state after the final watermark")
	return r.out.records
}

// checkTemporalPruned checks the state of every key of evs after
// watermark wm.
func checkTemporalPruned(t *testing.T, op *temporalJoin, evs []tjEvent, wm int64) {
	for _, e := range evs {
		key, err := pipeline.EncodeKey(nil, e.k)
		require.NoError(t, err)
		for _, l := range op.left.Get(string(key), "") {
			require.Greater(t, l.T, wm, "key %s: a left record the watermark reached still waits", e.k)
		}
		vs := op.versions.Get(string(key), "")
		require.True(t, slices.IsSortedFunc(vs, func(a, b temporalRow) int { return cmp.Compare(a.T, b.T) }), "key %s: versions out of order", e.k)
		old := 0
		for _, v := range vs {
			if v.T <= wm {
				old++
				require.False(t, v.Del, "key %s: a delete the watermark passed is kept", e.k)
			}
		}
		require.LessOrEqual(t, old, 1, "key %s: versions at or before the watermark %d: %v", e.k, wm, vs)
	}
}

// temporalStateEntries counts the state entries and timers of the rig's
// backend.
func temporalStateEntries(r *temporalRig) int {
	n := 0
	for _, name := range r.backend.StateNames() {
		st, err := r.backend.State(name)
		require.NoError(r.t, err)
		for g := range 128 {
			for key := range st.Keys(g) {
				for range st.Namespaces(key) {
					n++
				}
			}
		}
	}
	ts := r.backend.TimerService(r.info.ID)
	return n + ts.Len(statestore.EventTime) + ts.Len(statestore.ProcessingTime)
}

// TestTemporalJoinProperty: for random inputs, in random arrival orders
// (both inputs interleaved at random, each out of order), with random
// watermarks that make no record late and random restarts, the temporal
// join emits exactly what the reference join says, for inner and left
// joins; state is pruned after each watermark and empty at the end.
func TestTemporalJoinProperty(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, typ := range []string{"inner", "left"} {
		yaml := temporalYAML(typ)
		for i := range 300 {
			evs := randomTemporalInput(rng)
			want := temporalReference(evs, joinTypes[typ])
			for order := range 2 {
				rng.Shuffle(len(evs), func(a, b int) { evs[a], evs[b] = evs[b], evs[a] })
				got := temporalRows(runTemporal(t, rng, yaml, evs))
				require.Equal(t, want, got, "%s join, input %d, arrival order %d: %v", typ, i, order, evs)
			}
		}
	}
}

// TestTemporalJoinKafkaTable: the right side read from a compacted Kafka
// topic: the version time is the record's Kafka timestamp (version:
// _timestamp), and a tombstone (a record without fields) deletes the
// key's row from its timestamp on.
func TestTemporalJoinKafkaTable(t *testing.T) {
	yaml := joinYAML("      on: {left: product, right: _key}\n      type: left\n      temporal: {version: _timestamp}\n"+
		"      select:\n        order: left.id\n        price: right.price\n", "")
	r := newTemporalRig(t, yaml)
	defer r.close()
	key, err := pipeline.EncodeKey(nil, "p1")
	require.NoError(t, err)
	table := func(ts int64, fields map[string]any) pipeline.Record {
		return pipeline.Record{Fields: fields, Time: pipeline.NoTime, Key: string(key), Meta: &expr.Meta{Key: []byte("p1"), Timestamp: ts}}
	}
	order := func(id, ts int64) pipeline.Record {
		return pipeline.Record{Fields: map[string]any{"id": id, "product": "p1"}, Time: ts, Key: string(key)}
	}
	require.NoError(t, r.op.ProcessInput(sideRight, []pipeline.Record{
		table(100, map[string]any{"price": int64(5)}),
		table(200, map[string]any{}), // a tombstone
		table(300, map[string]any{"price": int64(7)}),
	}, &r.out))
	require.NoError(t, r.op.ProcessInput(sideLeft, []pipeline.Record{order(1, 150), order(2, 200), order(3, 250), order(4, 300)}, &r.out))
	require.NoError(t, r.op.OnWatermark(pipeline.MaxWatermark, &r.out))
	got := map[any]any{}
	for _, rec := range r.out.records {
		got[rec.Fields["order"]] = rec.Fields["price"]
		require.Equal(t, string(key), rec.Key, "the output's key is the join key")
	}
	require.Equal(t, map[any]any{int64(1): int64(5), int64(2): nil, int64(3): nil, int64(4): int64(7)}, got)
}

// TestTemporalJoinLateTombstone: a tombstone older than the version valid
// at the watermark is late; it goes to late_output with _side although it
// had no fields.
func TestTemporalJoinLateTombstone(t *testing.T) {
	yaml := joinYAML("      on: {left: product, right: _key}\n      temporal: {version: _timestamp}\n", "    late_output: late\n")
	r := newTemporalRig(t, yaml)
	defer r.close()
	key, err := pipeline.EncodeKey(nil, "p1")
	require.NoError(t, err)
	table := func(ts int64, fields map[string]any) pipeline.Record {
		return pipeline.Record{Fields: fields, Time: pipeline.NoTime, Key: string(key), Meta: &expr.Meta{Key: []byte("p1"), Timestamp: ts}}
	}
	require.NoError(t, r.op.ProcessInput(sideRight, []pipeline.Record{table(100, map[string]any{"price": int64(5)}), table(300, map[string]any{"price": int64(7)})}, &r.out))
	require.NoError(t, r.op.OnWatermark(400, &r.out))
	require.NoError(t, r.op.ProcessInput(sideRight, []pipeline.Record{table(200, nil)}, &r.out))
	require.Len(t, r.late.records, 1)
	require.Equal(t, map[string]any{fieldSide: "right"}, r.late.records[0].Fields)
	require.Len(t, r.op.versions.Get(string(key), ""), 1, "the late tombstone changed nothing")
}

// BenchmarkTemporalJoin enriches left records of 10,000 keys with a
// table of 10,000 rows that gets a new version of a tenth of its keys
// every batch, with the watermark following the left records (the
// versions of a key are pruned as it passes them). It reports events/s:
// left and right records processed per second of wall time.
func BenchmarkTemporalJoin(b *testing.B) {
	const keys, batch = 10_000, 1_000
	r := newTemporalRig(b, temporalYAML("inner"))
	defer r.close()
	encoded := make([]string, keys)
	for k := range keys {
		key, err := pipeline.EncodeKey(nil, int64(k))
		require.NoError(b, err)
		encoded[k] = string(key)
	}
	var out discardEmitter
	rng := rand.New(rand.NewPCG(1, 2))
	// The initial table, at time 0.
	for k := 0; k < keys; k += batch {
		in := make([]pipeline.Record, batch)
		for i := range in {
			in[i] = pipeline.Record{Fields: map[string]any{"k": int64(k + i), "v": int64(0)}, Time: 0, Key: encoded[k+i]}
		}
		require.NoError(b, r.op.ProcessInput(sideRight, in, out))
	}
	left := make([]pipeline.Record, batch)
	right := make([]pipeline.Record, batch/10)
	ts := int64(1)
	b.ReportAllocs()
	b.ResetTimer()
	events := 0
	for i := 0; i < b.N; i++ {
		for j := range right {
			k := rng.IntN(keys)
			right[j] = pipeline.Record{Fields: map[string]any{"k": int64(k), "v": int64(i)}, Time: ts, Key: encoded[k]}
		}
		require.NoError(b, r.op.ProcessInput(sideRight, right, out))
		for j := range left {
			k := rng.IntN(keys)
			left[j] = pipeline.Record{Fields: map[string]any{"k": int64(k), "id": int64(j)}, Time: ts + int64(j%10), Key: encoded[k]}
		}
		require.NoError(b, r.op.ProcessInput(sideLeft, left, out))
		require.NoError(b, r.op.OnWatermark(ts+9, out))
		ts += 10
		events += len(left) + len(right)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// discardEmitter drops what it gets.
type discardEmitter struct{}

func (discardEmitter) Emit([]pipeline.Record) error { return nil }
