package operators

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// temporalJoin is the event-time temporal (enrichment) join of one
// subtask, Flink's TemporalRowTimeJoinOperator (docs/joins.md, "Temporal
// join"). The right input is a versioned table keyed by the join key:
// each right record is a version of its key's row, valid from its version
// time until the key's next version. Each left record waits in state until
// the watermark reaches its time, then joins the version valid at that
// time.
//
// State, per key (both lists live under the key, namespace ""):
//   - left: the left records waiting for the watermark, in arrival order;
//   - versions: the key's versions sorted by version time; a delete is a
//     version too.
//
// Timers, per key and without namespace: one at each waiting left record's
// time (the watermark reaching it emits the record), and one at each
// version's time + allowed_lateness (the horizon, watermark - lateness,
// reaching it makes older versions useless). A firing timer settles the
// whole key: it emits every left record the watermark reached and prunes
// the versions, so state holds, per key, the newest version at or before
// the horizon and the newer ones, and nothing once only a delete is left.
type temporalJoin struct {
	joinBase
	left     statestore.ListState[temporalRow]
	versions statestore.ListState[temporalRow]

	// out gathers the records a call emits; rows and due are scratch.
	out  []pipeline.Record
	rows []temporalRow
	due  []temporalRow
}

// temporalRow is a waiting left record, or a version of a right row: its
// time (the left record's event time, the version's version time), its
// fields (none for a delete) and whether it deletes the key's row.
type temporalRow struct {
	_   struct{} `cbor:",toarray"`
	T   int64
	F   map[string]any
	Del bool
}

// newTemporalJoin returns the temporal join of one subtask for plan p.
func newTemporalJoin(p *joinPlan) *temporalJoin { return &temporalJoin{joinBase: joinBase{plan: p}} }

// Open sets up the shared parts and registers the join's state.
func (j *temporalJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	if err := j.open(oc); err != nil {
		return err
	}
	var err error
	if j.left, err = statestore.RegisterList(j.backend, statestore.ListDescriptor[temporalRow]{Name: oc.ID + "/left"}); err != nil {
		return fmt.Errorf("join %q: %w", oc.ID, err)
	}
	if j.versions, err = statestore.RegisterList(j.backend, statestore.ListDescriptor[temporalRow]{Name: oc.ID + "/versions"}); err != nil {
		return fmt.Errorf("join %q: %w", oc.ID, err)
	}
	return nil
}

// Process is not called: the runtime calls ProcessInput.
func (j *temporalJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput buffers left records until the watermark reaches them and
// adds right records to their key's versions.
func (j *temporalJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	for i := range in {
		var err error
		if side == sideLeft {
			err = j.addLeft(&in[i])
		} else {
			err = j.addRight(&in[i])
		}
		if err != nil {
			return j.flush(out, err)
		}
	}
	return j.flush(out, nil)
}

// OnWatermark emits the left records that wm reached, each joined with the
// version valid at its time, and prunes the versions no left record can
// join any more. At the final watermark no record can join at all: every
// version goes.
func (j *temporalJoin) OnWatermark(wm int64, out pipeline.Emitter) error {
	if wm <= j.wm {
		return nil
	}
	j.wm = wm
	err := j.timers.AdvanceWatermark(wm, func(t statestore.Timer) error { return j.settle(t.Key, t.Timestamp) })
	if err == nil && wm == pipeline.MaxWatermark {
		j.clearVersions()
	}
	return j.flush(out, err)
}

// Finish has nothing left to emit: the final watermark emitted every
// waiting left record, and after a stop without it they stay in state.
func (j *temporalJoin) Finish(out pipeline.Emitter) error { return j.flush(out, nil) }

// horizon is the time at or before which left records are late: the
// watermark less allowed_lateness. Versions at or before it are needed
// only as the newest one of their key.
func (j *temporalJoin) horizon() int64 { return satAdd(j.wm, -j.plan.lateness) }

// addLeft handles a left record: a late one goes to the late output, one
// the watermark already passed (within allowed_lateness) joins at once,
// any other waits in state for the watermark. The error is one that must
// fail the task.
func (j *temporalJoin) addLeft(r *pipeline.Record) error {
	t, err := eventTime(r)
	if err != nil {
		return j.errs.Handle(*r, err)
	}
	switch {
	case t <= j.horizon():
		j.lateRecord(sideLeft, r)
	case t <= j.wm:
		return j.emitJoin(r.Key, temporalRow{T: t, F: r.Fields}, j.versions.Get(r.Key, ""))
	default:
		j.left.Add(r.Key, "", temporalRow{T: t, F: r.Fields})
		j.timers.RegisterEventTimer(r.Key, "", t)
	}
	return nil
}

// addRight adds a right record to its key's versions: a -U row is
// skipped (the +U after it is the new version), a -D row or one without
// fields (a Kafka tombstone) deletes the key's row from its version time
// on, any other is the row's new version; a version of the same time as
// one already held replaces it. A version at or before the horizon still
// counts for the left records to come when it is the key's newest there;
// one that a newer version at or before the horizon supersedes can never
// be joined: it is late.
func (j *temporalJoin) addRight(r *pipeline.Record) error {
	del := len(r.Fields) == 0
	switch op := r.Fields[pipeline.OpField].(type) {
	case nil:
	case string:
		switch op {
		case pipeline.OpInsert, pipeline.OpUpdate:
		case pipeline.OpRetract:
			return nil
		case pipeline.OpDelete:
			del = true
		default:
			return j.errs.Handle(*r, fmt.Errorf("%w: %s is %q; a changelog row has +I, -U, +U or -D", errBadOp, pipeline.OpField, op))
		}
	default:
		return j.errs.Handle(*r, fmt.Errorf("%w: %s is a %T; a changelog row has +I, -U, +U or -D", errBadOp, pipeline.OpField, op))
	}
	t, err := j.versionTime(r)
	if err != nil {
		return j.errs.Handle(*r, err)
	}
	vs := j.versions.Get(r.Key, "")
	i, found := slices.BinarySearchFunc(vs, t, func(v temporalRow, t int64) int { return cmp.Compare(v.T, t) })
	next := i
	if found {
		next++
	}
	h := j.horizon()
	if t <= h && next < len(vs) && vs[next].T <= h {
		j.lateRecord(sideRight, r)
		return nil
	}
	v := temporalRow{T: t, Del: del}
	if !del {
		delete(r.Fields, pipeline.OpField)
		v.F = r.Fields
	}
	j.rows = append(append(append(j.rows[:0], vs[:i]...), v), vs[next:]...)
	j.versions.Update(r.Key, "", j.rows)
	clear(j.rows)
	if t <= h {
		j.prune(r.Key)
		return nil
	}
	j.timers.RegisterEventTimer(r.Key, "", satAdd(t, j.plan.lateness))
	return nil
}

// lateRecord hands a late record of side to tooLate, with a field map
// for its _side if it had none.
func (j *temporalJoin) lateRecord(side int, r *pipeline.Record) {
	if r.Fields == nil {
		r.Fields = map[string]any{}
	}
	j.tooLate(side, *r)
}

// versionTime returns a right record's version time: the temporal.version
// expression's value, or else the record's event time.
func (j *temporalJoin) versionTime(r *pipeline.Record) (int64, error) {
	e := j.plan.version
	if e == nil {
		return eventTime(r)
	}
	v, err := j.vm.EvalRecord(e, r.Fields, r.Meta)
	var t int64
	if err == nil {
		t, err = epochMillis(v)
	}
	if err != nil {
		return 0, &evalError{kind: "join temporal.version", src: e.Source, err: err}
	}
	return t, nil
}

// settle is a timer of key firing at ts: it emits the key's left records
// that the watermark reached, in time order, and prunes its versions. The
// other timers of the emitted records are deleted: they would find
// nothing to do. The error is one that must fail the task.
func (j *temporalJoin) settle(key string, ts int64) error {
	if left := j.left.Get(key, ""); len(left) > 0 {
		j.due, j.rows = j.due[:0], j.rows[:0]
		for _, l := range left {
			if l.T <= j.wm {
				j.due = append(j.due, l)
			} else {
				j.rows = append(j.rows, l)
			}
		}
		if len(j.due) > 0 {
			j.left.Update(key, "", j.rows)
			clear(j.rows)
			slices.SortStableFunc(j.due, func(a, b temporalRow) int { return cmp.Compare(a.T, b.T) })
			vs := j.versions.Get(key, "")
			for _, l := range j.due {
				if l.T != ts {
					j.timers.DeleteEventTimer(key, "", l.T)
				}
				if err := j.emitJoin(key, l, vs); err != nil {
					return err
				}
			}
			clear(j.due)
		}
	}
	j.prune(key)
	return nil
}

// prune drops the versions of key that no left record still to come can
// join: those older than the newest version at or before the horizon, and
// that one too when it is a delete (for a left record after the horizon
// it means what no version means). A key without versions holds no state.
func (j *temporalJoin) prune(key string) {
	vs := j.versions.Get(key, "")
	h := j.horizon()
	// The first version after the horizon; the one before it is kept.
	n, _ := slices.BinarySearchFunc(vs, h, func(v temporalRow, h int64) int {
		if v.T <= h {
			return -1
		}
		return 1
	})
	keep := max(n-1, 0)
	if keep < len(vs) && vs[keep].Del && vs[keep].T <= h {
		keep++
	}
	if keep > 0 {
		j.versions.Update(key, "", vs[keep:])
	}
}

// emitJoin joins left record l of key with the version of vs valid at its
// time: the newest one at or before it, unless that one is a delete. With
// none, a left join emits l with right nil and an inner join nothing. The
// error is one that must fail the task.
func (j *temporalJoin) emitJoin(key string, l temporalRow, vs []temporalRow) error {
	var right map[string]any
	if v := validAt(vs, l.T); v != nil {
		right = v.F
	} else if j.plan.typ != joinLeft {
		return nil
	}
	rec, err := j.joined(l.F, right, l.T, key)
	if err != nil {
		return j.errs.Handle(pipeline.Record{Fields: l.F, Time: l.T, Key: key}, err)
	}
	j.out = append(j.out, rec)
	return nil
}

// validAt returns the version of vs (sorted by time) valid at t, or nil
// when there is none or it is a delete.
func validAt(vs []temporalRow, t int64) *temporalRow {
	n, _ := slices.BinarySearchFunc(vs, t, func(v temporalRow, t int64) int {
		if v.T <= t {
			return -1
		}
		return 1
	})
	if n == 0 || vs[n-1].Del {
		return nil
	}
	return &vs[n-1]
}

// clearVersions drops every version, once the final watermark made every
// later left record late.
func (j *temporalJoin) clearVersions() {
	start, end := j.backend.KeyGroupRange()
	for g := start; g < end; g++ {
		for key := range j.versions.Keys(g) {
			j.versions.Clear(key, "")
		}
	}
}

// flush emits what the call produced, the main output first, then the
// late records, and returns failed (a record that failed the task) unless
// an emit failed first.
func (j *temporalJoin) flush(out pipeline.Emitter, failed error) error {
	err := emit(out, j.out)
	clear(j.out)
	j.out = j.out[:0]
	if lerr := j.flushLate(); err == nil {
		err = lerr
	}
	if err == nil {
		err = failed
	}
	return err
}

// epochMillis converts a version expression's value to epoch ms, as a
// source's event_time is: an integer or float number of ms, a time, or a
// timestamp string (zone-less ones in UTC).
func epochMillis(v any) (int64, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), nil
		}
	case float64:
		if !math.IsNaN(x) && !math.IsInf(x, 0) && x <= math.MaxInt64 && x >= math.MinInt64 {
			return int64(x), nil
		}
	case time.Time:
		return x.UnixMilli(), nil
	case string:
		return expr.ParseTimestamp(x, time.UTC)
	case nil:
		return 0, errors.New("the record has no version time (the expression returned null)")
	}
	return 0, fmt.Errorf("%v (%T) is not a time: return epoch milliseconds, a time or a timestamp string", v, v)
}
