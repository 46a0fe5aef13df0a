package operators

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// A regular join (docs/joins.md, "Regular join") is Flink SQL's streaming
// join of two dynamic tables (StreamingJoinOperator): each side's rows are
// kept in keyed state, as a multiset per join key, and every arriving row
// joins every row of the other side's key at once. Its output is a
// changelog (_op): an arriving insert adds its joined rows, an arriving
// retraction (an input that is itself a changelog) takes them back.
//
// For each side and key the state is a map from a row's identity (its
// fields without _op, canonically encoded: rowID) to the row, its count
// (a multiset) and, for an outer side, its number of associations: how
// many rows of the other side it joins (Flink's OuterJoinRecordStateView).
// An outer row with no association is in the output padded with nil; its
// first partner turns that row into joined ones, its last partner's
// retraction turns it back.
//
// Output kinds follow Flink's: an inner join forwards the input's kind
// (+I, +U, -U, -D; a row without _op is +I); an outer join emits +I and
// -D, except that a retraction arriving on the side that is not outer
// keeps its kind (-U or -D) for the joined rows it takes back.

// The names of the join's states, after the step id: one map per side.
var regularStateNames = [2]string{"/regular/left", "/regular/right"}

// errRetractUnheld marks a retraction of a row the join does not hold.
var errRetractUnheld = errors.New("retraction of a row the join does not hold")

// joinRow is one distinct row of a side's key in the state: the row, how
// many times it was inserted and not retracted (N), and, on an outer
// side, how many rows of the other side each of its copies joins (Assoc).
type joinRow struct {
	_     struct{} `cbor:",toarray"`
	Row   map[string]any
	N     int64
	Assoc int64
}

// joinPartner is a row of the other side that an arriving row joins.
type joinPartner struct {
	id string
	joinRow
}

// regularJoin is the regular join of one subtask.
type regularJoin struct {
	joinBase
	// rows holds each side's rows per key (regularStateNames).
	rows [2]statestore.MapState[string, joinRow]
	// ttl is plan.ttl in ms; 0: rows never expire.
	ttl    int64
	wakeAt func(int64)
	// cleanupAt is the pending wake-up that deletes expired rows (0: none);
	// wrote says that rows were written since it was asked for.
	cleanupAt int64
	wrote     bool

	// Scratch, reused across records.
	partners []joinPartner
	names    []string
	idBuf    []byte
	out      []pipeline.Record
}

func newRegularJoin(p *joinPlan) *regularJoin {
	ttl := p.ttl.Milliseconds()
	if p.ttl > 0 && ttl == 0 {
		ttl = 1 // as the state's TTL rounds it
	}
	return &regularJoin{joinBase: joinBase{plan: p}, ttl: ttl}
}

// Open sets up the shared parts and registers both sides' states with the
// join's ttl (statestore TTL: processing time, restarted by every write
// of a row).
func (j *regularJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	for _, s := range j.plan.selects {
		if s.Name == pipeline.OpField {
			return fmt.Errorf("regular join %q: select field %s: a regular join's output carries its changelog kind in %s; name the field otherwise", oc.ID, s.Name, pipeline.OpField)
		}
	}
	if err := j.open(oc); err != nil {
		return err
	}
	for side, name := range regularStateNames {
		st, err := statestore.RegisterMap(j.backend, statestore.MapDescriptor[string, joinRow]{
			Name: oc.ID + name,
			TTL:  j.plan.ttl,
		})
		if err != nil {
			return fmt.Errorf("regular join %q: %w", oc.ID, err)
		}
		j.rows[side] = st
	}
	j.wakeAt = oc.WakeAt
	// Restored rows expire within ttl from now.
	j.scheduleCleanup(j.now())
	return nil
}

// Process is not called: the runtime calls ProcessInput.
func (j *regularJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput joins the records of one side, in input order, and emits
// the changes in one batch. A record that fails (a bad _op, a retraction
// of a row the join does not hold, a select that fails) changes nothing
// and follows on_error.
func (j *regularJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	j.out = j.out[:0]
	for i := range in {
		if err := j.record(side, &in[i]); err != nil {
			if herr := j.errs.Handle(in[i], err); herr != nil {
				err := failAfter(out, j.out, herr)
				j.release()
				return err
			}
		}
	}
	if len(in) > 0 && j.ttl > 0 {
		j.scheduleCleanup(j.now())
	}
	clear(in) // the input records are consumed
	err := emit(out, j.out)
	j.release()
	return err
}

// release lets the emitted records go and keeps the output slice.
func (j *regularJoin) release() {
	clear(j.out)
	j.out = j.out[:0]
}

// record joins one record of side: it appends the changes to j.out, then
// updates the state. An error leaves both untouched.
func (j *regularJoin) record(side int, r *pipeline.Record) error {
	op, retract, err := changelogKind(r.Fields)
	if err != nil {
		return err
	}
	id, err := j.rowID(r.Fields)
	if err != nil {
		return err
	}
	mine, other := j.rows[side], j.rows[1-side]
	own, held := mine.Get(r.Key, "", id)
	if retract && !held && j.ttl == 0 {
		return fmt.Errorf("%w: %s %q", errRetractUnheld, pipeline.OpField, op)
	}
	j.partners = j.partners[:0]
	defer func() { clear(j.partners) }() // let the rows go
	var matches int64
	for pid, p := range other.Iterate(r.Key, "") {
		j.partners = append(j.partners, joinPartner{pid, p})
		matches += p.N
	}
	fields := r.Fields
	if retract && held {
		fields = own.Row // take back exactly what was joined
	}
	mark := len(j.out)
	if err := j.changes(side, op, retract, matches, fields, r); err != nil {
		clear(j.out[mark:])
		j.out = j.out[:mark]
		return err
	}
	j.update(side, retract, held, own, id, matches, r)
	return nil
}

// changes appends the changelog rows that an arriving row causes, in
// Flink's order: per partner copy, the retraction of the partner's
// padded row (its first association) before the joined row, or the
// joined row's retraction before the partner's padded row (its last).
func (j *regularJoin) changes(side int, op string, retract bool, matches int64, fields map[string]any, r *pipeline.Record) error {
	inOuter, otherOuter := j.plan.typ.keepsUnmatched(side), j.plan.typ.keepsUnmatched(1-side)
	if matches == 0 {
		if !inOuter {
			return nil
		}
		kind := pipeline.OpInsert
		if retract {
			kind = pipeline.OpDelete
		}
		return j.pair(side, kind, fields, nil, r)
	}
	kind := op // an inner join, or a retraction on the inner side, forwards it
	switch {
	case !retract && (inOuter || otherOuter):
		kind = pipeline.OpInsert
	case retract && inOuter:
		kind = pipeline.OpDelete
	}
	for i := range j.partners {
		p := &j.partners[i]
		for range p.N {
			if !retract && otherOuter && p.Assoc == 0 {
				if err := j.pair(side, pipeline.OpDelete, nil, p.Row, r); err != nil {
					return err
				}
			}
			if err := j.pair(side, kind, fields, p.Row, r); err != nil {
				return err
			}
			if retract && otherOuter && p.Assoc == 1 {
				if err := j.pair(side, pipeline.OpInsert, nil, p.Row, r); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// pair appends the output row of mine (of side) joined with theirs, either
// nil for a padded row, with kind as its _op and r's time and key.
func (j *regularJoin) pair(side int, kind string, mine, theirs map[string]any, r *pipeline.Record) error {
	l, rt := mine, theirs
	if side == sideRight {
		l, rt = theirs, mine
	}
	rec, err := j.joined(l, rt, r.Time, r.Key)
	if err != nil {
		return err
	}
	rec.Fields[pipeline.OpField] = kind
	j.out = append(j.out, rec)
	return nil
}

// update writes what an arriving row changes in the state: its own count
// (and, on an outer side, its associations: the matches it has now), and
// the associations of the other side's rows when that side is outer.
func (j *regularJoin) update(side int, retract, held bool, own joinRow, id string, matches int64, r *pipeline.Record) {
	mine, other := j.rows[side], j.rows[1-side]
	switch {
	case !retract:
		if !held {
			delete(r.Fields, pipeline.OpField) // the state keeps the row, not its kind
			own = joinRow{Row: r.Fields}
		}
		own.N++
		if j.plan.typ.keepsUnmatched(side) {
			own.Assoc = matches
		}
		mine.Put(r.Key, "", id, own)
	case held && own.N > 1:
		own.N--
		mine.Put(r.Key, "", id, own)
	case held:
		mine.Delete(r.Key, "", id)
	}
	if !j.plan.typ.keepsUnmatched(1 - side) {
		return
	}
	for i := range j.partners {
		p := j.partners[i].joinRow
		if retract {
			// A retraction of an expired row (ttl) may meet partners it
			// never joined: their count does not go below 0.
			p.Assoc = max(p.Assoc-1, 0)
		} else {
			p.Assoc++
		}
		other.Put(r.Key, "", j.partners[i].id, p)
	}
}

// changelogKind reads a record's _op: the kind to forward (+I for a row
// without one) and whether the row is a retraction (-U, -D).
func changelogKind(f map[string]any) (op string, retract bool, err error) {
	switch v := f[pipeline.OpField].(type) {
	case nil:
		return pipeline.OpInsert, false, nil
	case string:
		switch v {
		case pipeline.OpInsert, pipeline.OpUpdate:
			return v, false, nil
		case pipeline.OpRetract, pipeline.OpDelete:
			return v, true, nil
		}
		return "", false, fmt.Errorf("%w: %s is %q; a changelog row has +I, -U, +U or -D", errBadOp, pipeline.OpField, v)
	default:
		return "", false, fmt.Errorf("%w: %s is a %T; a changelog row has +I, -U, +U or -D", errBadOp, pipeline.OpField, v)
	}
}

// rowID returns the identity of a row: its fields but _op, by name, each
// value in its canonical key encoding (so 3 and 3.0 are one value), maps
// with sorted keys. Equal rows have equal ids whatever their Go types.
func (j *regularJoin) rowID(f map[string]any) (string, error) {
	j.names = j.names[:0]
	for n := range f {
		if n != pipeline.OpField {
			j.names = append(j.names, n)
		}
	}
	slices.Sort(j.names)
	buf := j.idBuf[:0]
	var err error
	for _, n := range j.names {
		buf, _ = pipeline.EncodeKey(buf, n)
		if buf, err = appendRowValue(buf, f[n]); err != nil {
			j.idBuf = buf
			return "", fmt.Errorf("field %q: %w", n, err)
		}
	}
	j.idBuf = buf
	return string(buf), nil
}

// Tags of the row encoding's nested values; the others are EncodeKey's.
const (
	rowTagList = 'L'
	rowTagMap  = 'M'
)

// appendRowValue appends the canonical encoding of a field value: scalars
// as keys, lists and maps (sorted by key) element by element.
func appendRowValue(buf []byte, v any) ([]byte, error) {
	var err error
	switch x := v.(type) {
	case []any:
		buf = binary.AppendUvarint(append(buf, rowTagList), uint64(len(x)))
		for _, e := range x {
			if buf, err = appendRowValue(buf, e); err != nil {
				return buf, err
			}
		}
		return buf, nil
	case map[string]any:
		buf = binary.AppendUvarint(append(buf, rowTagMap), uint64(len(x)))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			buf, _ = pipeline.EncodeKey(buf, k)
			if buf, err = appendRowValue(buf, x[k]); err != nil {
				return buf, err
			}
		}
		return buf, nil
	}
	buf, err = pipeline.EncodeKey(buf, v)
	if err != nil {
		return buf, fmt.Errorf("a regular join keeps rows of strings, numbers, bools, nulls, lists and maps, not %T", v)
	}
	return buf, nil
}

// OnProcessingTime deletes the rows whose ttl ran out (reads skip them
// already; this frees them) and asks to be called again while rows were
// written since.
func (j *regularJoin) OnProcessingTime(now int64, _ pipeline.Emitter) error {
	if j.cleanupAt == 0 {
		return nil
	}
	if now < j.cleanupAt {
		j.wakeAt(j.cleanupAt)
		return nil
	}
	if _, err := j.backend.Cleanup(); err != nil {
		return fmt.Errorf("regular join: delete expired rows: %w", err)
	}
	j.cleanupAt = 0
	if j.wrote {
		j.scheduleCleanup(now)
	}
	return nil
}

// scheduleCleanup asks for a cleanup once the rows written up to now have
// expired, unless one is pending (it then notes that rows were written).
func (j *regularJoin) scheduleCleanup(now int64) {
	if j.ttl == 0 || j.wakeAt == nil {
		return
	}
	if j.cleanupAt != 0 {
		j.wrote = true
		return
	}
	j.cleanupAt, j.wrote = saturatingAdd(now, j.ttl), false
	j.wakeAt(j.cleanupAt)
}
