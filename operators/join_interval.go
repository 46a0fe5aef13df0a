package operators

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// intervalJoin is the interval join of one subtask (docs/joins.md,
// "Interval join"): Flink's IntervalJoinOperator, whose outer types emit
// an unmatched record, null-padded, when its bound closes (as Kafka
// Streams 3.1 and later do).
//
// A left record at tl joins the right records of its key at tr in
// [tl + lower, tl + upper]. Each side keeps, per key, one buffer of the
// records that may still join a later record of the other side, sorted by
// time: one state entry and one lookup per record and side, rather than
// one per timestamp. The buffers are the accumulators of an
// AggregatingState, which the operator changes in place (the memory
// backend copies one first when a snapshot shares it); both sides are
// namespaces of it ("left" and "right"), so that the lookup of the other
// side's buffer and the write to the own one reach the same entry of the
// key. A record can join no later record once the watermark reaches its
// close time (closeAt): one event-time timer per key and side, at the
// close time of the buffer's first record, drops the records it has
// closed and emits the unmatched ones of an outer side.
type intervalJoin struct {
	joinBase
	// bufs are the buffers, by key and side (namespace ivNS[side]).
	bufs statestore.AggregatingState[*ivOp, ivBuffer, ivBuffer]
	// op is the change being applied to a buffer (reused: no allocation).
	op ivOp
	// out gathers the results of a call, emitted once at its end.
	out []pipeline.Record
}

func newIntervalJoin(p *joinPlan) *intervalJoin { return &intervalJoin{joinBase: joinBase{plan: p}} }

// ivEntry is one buffered record: its time, its fields (the record's own
// map, kept as it came: no copy, no encoding) and whether it has joined a
// record of the other side yet (what an outer join's close needs).
type ivEntry struct {
	_       struct{} `cbor:",toarray"`
	Time    int64
	Fields  map[string]any
	Matched bool
}

// ivBuffer is the buffered records of one key on one side, in time order;
// records of equal time in their order of arrival. The state holds the
// slice itself, not a pointer to it: one allocation less per buffer.
type ivBuffer []ivEntry

// ivOpKind is what an ivOp does to a buffer.
type ivOpKind uint8

const (
	// ivInsert inserts op.entry after the entries of its time or earlier.
	ivInsert ivOpKind = iota
	// ivMark marks the entries with time in [op.lo, op.hi] matched.
	ivMark
	// ivDrop removes the first op.n entries.
	ivDrop
)

// ivOp is the input of the buffers' AggregatingState: a change that the
// state's Add applies to the writable buffer, with what the operator needs
// to know about it afterwards.
type ivOp struct {
	kind   ivOpKind
	entry  ivEntry
	lo, hi int64
	n      int
	// first tells that ivInsert put the entry first; prev is then the time
	// of the entry that was first before, if any (hadPrev).
	first   bool
	hadPrev bool
	prev    int64
}

// ivNS are the namespaces of each side's buffers and cleanup timers.
var ivNS = sideNames

// Open sets up the shared parts and registers the buffers' state.
func (j *intervalJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	if err := j.open(oc); err != nil {
		return err
	}
	var err error
	j.bufs, err = statestore.RegisterAggregating(j.backend, statestore.AggregatingDescriptor[*ivOp, ivBuffer, ivBuffer]{
		Name:   oc.ID + "/interval",
		Add:    applyIvOp,
		Merge:  mergeIvBuffers,
		Result: func(b ivBuffer) ivBuffer { return b },
		Copy:   slices.Clone[ivBuffer],
	})
	if err != nil {
		return fmt.Errorf("join %q: %w", oc.ID, err)
	}
	return nil
}

// applyIvOp applies op to the writable buffer b (nil for a new one) and
// returns it: the AggregatingState's Add.
func applyIvOp(b ivBuffer, op *ivOp) ivBuffer {
	switch op.kind {
	case ivInsert:
		i := len(b)
		for i > 0 && b[i-1].Time > op.entry.Time { // mostly in order: from the end
			i--
		}
		op.first = i == 0
		if op.hadPrev = op.first && len(b) > 0; op.hadPrev {
			op.prev = b[0].Time
		}
		return slices.Insert(b, i, op.entry)
	case ivMark:
		for i := ivFirstAtOrAfter(b, op.lo); i < len(b) && b[i].Time <= op.hi; i++ {
			b[i].Matched = true
		}
	case ivDrop:
		return slices.Delete(b, 0, op.n)
	}
	return b
}

// mergeIvBuffers merges buffer src into acc in time order, which an
// AggregatingState requires; the join never merges namespaces.
func mergeIvBuffers(acc, src ivBuffer) ivBuffer {
	acc = append(acc, src...)
	slices.SortStableFunc(acc, func(a, b ivEntry) int { return cmpInt64(a.Time, b.Time) })
	return acc
}

// ivFirstAtOrAfter returns the index of the first entry with time >= t.
func ivFirstAtOrAfter(es []ivEntry, t int64) int {
	i, _ := slices.BinarySearchFunc(es, t, func(e ivEntry, t int64) int {
		if e.Time < t {
			return -1
		}
		return 1
	})
	return i
}

// closeAt is the watermark from which a record of side at time t can join
// no record that is not late (ts + lateness > W): a left record once no
// right record up to t + upper can come, a right one once no left record
// from t - lower on can.
func (j *intervalJoin) closeAt(side int, t int64) int64 {
	if side == sideLeft {
		return satAdd(satAdd(t, j.plan.upper), j.plan.lateness)
	}
	return satAdd(satAdd(t, -j.plan.lower), j.plan.lateness)
}

// partnerRange is the time range [lo, hi] of the records of the other
// side that a record of side at time t joins.
func (j *intervalJoin) partnerRange(side int, t int64) (lo, hi int64) {
	if side == sideLeft {
		return satAdd(t, j.plan.lower), satAdd(t, j.plan.upper)
	}
	return satAdd(t, -j.plan.upper), satAdd(t, -j.plan.lower)
}

// Process is not called: the runtime calls ProcessInput.
func (j *intervalJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput joins each record of side with the buffered records of the
// other side in its range, then buffers it while the watermark lets later
// records of the other side join it. A record without event time goes to
// on_error; a late one (ts + allowed_lateness <= the watermark) to
// late_output, or it is dropped and counted.
func (j *intervalJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	if side != sideLeft && side != sideRight {
		return fmt.Errorf("join: no input %d", side)
	}
	for i := range in {
		r := &in[i]
		if _, err := eventTime(r); err != nil {
			if err := j.errs.Handle(*r, err); err != nil {
				return j.flush(out, err)
			}
			continue
		}
		if satAdd(r.Time, j.plan.lateness) <= j.wm {
			j.tooLate(side, *r)
			continue
		}
		if err := j.add(side, r); err != nil {
			return j.flush(out, err)
		}
	}
	clear(in)
	return j.flush(out, nil)
}

// add joins record r of side with the other side's buffer and buffers it,
// or, when the watermark has closed it already, emits it null-padded if
// it joined nothing and its side is kept unmatched. The error is one that
// must fail the task.
func (j *intervalJoin) add(side int, r *pipeline.Record) error {
	other := 1 - side
	lo, hi := j.partnerRange(side, r.Time)
	matched, mark := false, false
	if buf, ok := j.bufs.Accumulator(r.Key, ivNS[other]); ok {
		for i := ivFirstAtOrAfter(buf, lo); i < len(buf) && buf[i].Time <= hi; i++ {
			e := &buf[i]
			matched = true
			mark = mark || !e.Matched
			l, rf := r.Fields, e.Fields
			if side == sideRight {
				l, rf = rf, l
			}
			if err := j.emitJoined(l, rf, max(r.Time, e.Time), r); err != nil {
				return err
			}
		}
	}
	if mark && j.plan.typ.keepsUnmatched(other) {
		j.op = ivOp{kind: ivMark, lo: lo, hi: hi}
		j.bufs.Add(r.Key, ivNS[other], &j.op)
	}
	if j.closeAt(side, r.Time) <= j.wm {
		if !matched && j.plan.typ.keepsUnmatched(side) {
			return j.emitPadded(side, r)
		}
		return nil
	}
	j.op = ivOp{kind: ivInsert, entry: ivEntry{Time: r.Time, Fields: r.Fields, Matched: matched}}
	j.bufs.Add(r.Key, ivNS[side], &j.op)
	if j.op.first {
		if j.op.hadPrev {
			j.timers.DeleteEventTimer(r.Key, ivNS[side], j.closeAt(side, j.op.prev))
		}
		j.timers.RegisterEventTimer(r.Key, ivNS[side], j.closeAt(side, r.Time))
	}
	j.op.entry = ivEntry{}
	return nil
}

// emitJoined adds the result of the pair (l, r) at time t to the output;
// a failing select sends rec, the record that made the pair, to on_error.
func (j *intervalJoin) emitJoined(l, r map[string]any, t int64, rec *pipeline.Record) error {
	res, err := j.joined(l, r, t, rec.Key)
	if err != nil {
		return j.errs.Handle(*rec, err)
	}
	j.out = append(j.out, res)
	return nil
}

// emitPadded adds the row of the unmatched record rec of side, the other
// side nil, at rec's time.
func (j *intervalJoin) emitPadded(side int, rec *pipeline.Record) error {
	if side == sideLeft {
		return j.emitJoined(rec.Fields, nil, rec.Time, rec)
	}
	return j.emitJoined(nil, rec.Fields, rec.Time, rec)
}

// OnWatermark drops the buffered records that wm closes, emitting those
// of an outer side that never joined.
func (j *intervalJoin) OnWatermark(wm int64, out pipeline.Emitter) error {
	if wm <= j.wm {
		return nil
	}
	j.wm = wm
	return j.flush(out, j.timers.AdvanceWatermark(wm, j.expire))
}

// Finish emits nothing: the final watermark has closed every record.
func (j *intervalJoin) Finish(out pipeline.Emitter) error { return j.flush(out, nil) }

// expire handles the cleanup timer of a key and side: it drops the
// records the watermark has closed and sets the timer again for the first
// one left.
func (j *intervalJoin) expire(t statestore.Timer) error {
	side := sideLeft
	switch t.Namespace {
	case ivNS[sideLeft]:
	case ivNS[sideRight]:
		side = sideRight
	default:
		return fmt.Errorf("join: a timer of unknown namespace %q", t.Namespace)
	}
	buf, ok := j.bufs.Accumulator(t.Key, t.Namespace)
	if !ok {
		return nil
	}
	n := 0
	for n < len(buf) && j.closeAt(side, buf[n].Time) <= j.wm {
		n++
	}
	if j.plan.typ.keepsUnmatched(side) {
		for i := range buf[:n] {
			if e := &buf[i]; !e.Matched {
				rec := pipeline.Record{Fields: e.Fields, Time: e.Time, Key: t.Key}
				if err := j.emitPadded(side, &rec); err != nil {
					return err
				}
			}
		}
	}
	if n == len(buf) {
		j.bufs.Clear(t.Key, t.Namespace)
		return nil
	}
	next := buf[n].Time
	if n > 0 {
		j.op = ivOp{kind: ivDrop, n: n}
		j.bufs.Add(t.Key, t.Namespace, &j.op)
	}
	j.timers.RegisterEventTimer(t.Key, t.Namespace, j.closeAt(side, next))
	return nil
}

// flush emits the results and late records of a call, then returns err;
// an error of the emit wins, as in failAfter.
func (j *intervalJoin) flush(out pipeline.Emitter, err error) error {
	eerr := emit(out, j.out)
	clear(j.out)
	j.out = j.out[:0]
	if lerr := j.flushLate(); eerr == nil {
		eerr = lerr
	}
	if eerr != nil {
		return eerr
	}
	return err
}
