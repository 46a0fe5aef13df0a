package operators

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
)

// A continuous aggregate is a key_by step with an aggregate and no window:
//
//	steps:
//	  - id: totals
//	    key_by: customer
//	    aggregate:
//	      orders: count()
//	      spent: sum(amount)
//
// It is Flink's aggregation over a dynamic table: one row per key, updated
// by every record, and a changelog stream out (docs/changelog.md). The first
// record of a key emits the row as an insert (_op "+I"); every later record
// emits the retraction of the key's previous row (_op "-U", its old values)
// followed by the new row (_op "+U"). An update that leaves every aggregate
// unchanged emits nothing, as Flink's group aggregation does without state
// TTL. Input rows that are themselves retractions (_op "-U" or "-D", from an
// upstream continuous aggregate) take their record back out of the row
// (Row.Retract); when a key's row holds no record any more, its last row is
// deleted (_op "-D") and the key's state dropped.
//
// Output records hold the key field(s), named like a window's (see
// keyFieldNames), every aggregate and _op; their time is the input
// record's, their Key the input's.

// continuousState is the name of the rows' state in the step's backend.
const continuousState = "aggregate/rows"

// Errors of a continuous aggregate's input.
var (
	// errBadOp marks an input record whose _op is not a changelog kind.
	errBadOp = errors.New("bad changelog kind")
	// errRetractUnknown marks a retraction for a key without a row.
	errRetractUnknown = errors.New("retraction of a key that holds no row")
)

// newContinuousAggregate returns the operator of a key_by step with an
// aggregate and no window. c.Aggregate is compiled (c.Validate ran).
func newContinuousAggregate(c *KeyByConfig) (pipeline.Operator, error) {
	if err := validateContinuousAggregate(c); err != nil {
		return nil, err
	}
	if !c.Aggregate.Compiled() {
		return nil, agg.ErrNotCompiled
	}
	names := keyFieldNames(c.KeyBy)
	op := &continuousOp{
		specs:     c.Aggregate,
		keyNames:  names,
		composite: len(c.KeyBy) > 1,
		width:     len(c.Aggregate) + len(names) + 1,
	}
	if len(c.KeyBy) == 1 {
		op.keyField = plainFieldName(&c.KeyBy[0])
	}
	return op, nil
}

// validateContinuousAggregate reports output fields that would collide: an
// aggregate named like a key field or like _op. KeyByConfig.Validate calls
// it for a key_by with an aggregate and no window.
func validateContinuousAggregate(c *KeyByConfig) error {
	keys := map[string]bool{}
	for _, n := range keyFieldNames(c.KeyBy) {
		keys[n] = true
	}
	var errs []error
	for _, s := range c.Aggregate {
		switch {
		case s.Name == pipeline.OpField:
			errs = append(errs, pipeline.FieldErr("aggregate."+s.Name,
				"%s is the changelog kind of every output row; name the aggregate otherwise", pipeline.OpField))
		case keys[s.Name]:
			errs = append(errs, pipeline.FieldErr("aggregate."+s.Name,
				"the output row already has the key field %q; name the aggregate otherwise", s.Name))
		}
	}
	return errors.Join(errs...)
}

// plainFieldName returns the field name when e reads nothing but one
// top-level record field, else "".
func plainFieldName(e *expr.Expr) string {
	tree, err := parser.Parse(e.Source)
	if err != nil {
		return ""
	}
	id, ok := tree.Node.(*ast.IdentifierNode)
	if !ok || id.Value == "$env" {
		return ""
	}
	if e.Program() != nil {
		// A name the compiler resolves otherwise (a builtin) is not a field.
		var vm expr.VM
		probe := new(int)
		if got, err := vm.Eval(e, map[string]any{id.Value: probe}); err != nil || got != any(probe) {
			return ""
		}
	}
	return id.Value
}

// continuousIn is what the rows' state folds in: a record, added or
// retracted.
type continuousIn struct {
	fields  map[string]any
	retract bool
}

// continuousOp is the continuous aggregate of one subtask.
type continuousOp struct {
	specs     agg.Specs
	keyNames  []string
	composite bool
	width     int // fields of an output row

	vm     expr.VM
	errors *pipeline.ErrorHandler
	rows   statestore.AggregatingState[continuousIn, *aggRow, *aggRow]

	// Set by the state's Add function for the record being folded in: the
	// row, and the record's error (a bad input) or the state's.
	cur *aggRow
	err error
	// fatal is a failure of the state's Copy function, which runs before Add.
	fatal error

	// Scratch, reused across records and batches.
	out      []pipeline.Record
	free     []map[string]any // maps built but not emitted
	scratch  *agg.Row         // decodes a restored row that is only read
	lastKey  string           // key whose values keyVals holds
	keyVals  []any
	keyField string // the field of a single plain-field key, else ""
	keyBuf   []byte
}

// Open registers the rows' state on the step's keyed state backend.
func (o *continuousOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	o.errors = oc.Errors
	if o.errors == nil {
		o.errors = pipeline.NewErrorHandler(oc.SubtaskInfo, pipeline.OnErrorFail, nil)
	}
	if oc.KeyedState == nil {
		return errors.New("a continuous aggregate needs keyed state, and the operator context has none")
	}
	b, err := oc.KeyedState()
	if err != nil {
		return err
	}
	o.rows, err = statestore.RegisterAggregating(b, statestore.AggregatingDescriptor[continuousIn, *aggRow, *aggRow]{
		Name: continuousState,
		Create: func() *aggRow {
			a, r := agg.NewAccsWith[aggRow](o.specs)
			a.row = r
			return a
		},
		Add: o.fold,
		// Merge is required by the descriptor; nothing merges namespaces
		// of this state.
		Merge: func(a, b *aggRow) *aggRow {
			if err := o.writable(a); err != nil {
				o.fatal = err
			} else if err := o.writable(b); err != nil {
				o.fatal = err
			} else if err := a.row.Merge(b.row); err != nil {
				o.fatal = &stateError{err}
			}
			return a
		},
		Result: func(a *aggRow) *aggRow { return a },
		Copy:   o.copyRow,
	})
	if err != nil {
		return fmt.Errorf("continuous aggregate state: %w", err)
	}
	o.keyVals = make([]any, len(o.keyNames))
	return nil
}

// Close has nothing to release: the runtime closes the backend.
func (o *continuousOp) Close() error { return nil }

// fold is the state's Add function: it runs on the writable copy of the
// key's row (the backend copied it first if a snapshot shares it).
func (o *continuousOp) fold(a *aggRow, in continuousIn) *aggRow {
	o.cur = a
	if o.err = o.writable(a); o.err != nil {
		return a
	}
	if in.retract {
		o.err = a.row.Retract(&o.vm, in.fields)
	} else {
		o.err = a.row.Add(&o.vm, in.fields)
	}
	return a
}

// writable decodes a restored row in place; a must not be shared with a
// snapshot (the state's Add and Merge functions get such rows).
func (o *continuousOp) writable(a *aggRow) error {
	if a.row != nil {
		return nil
	}
	r := agg.NewAccs(o.specs)
	if err := r.UnmarshalCBOR(a.raw); err != nil {
		return &stateError{fmt.Errorf("restore the row of a continuous aggregate: %w", err)}
	}
	a.row, a.raw = r, nil
	return nil
}

// copyRow deep-copies a row for the backend's copy-on-write: a row that a
// snapshot shares is copied before it is changed.
func (o *continuousOp) copyRow(a *aggRow) *aggRow {
	if a.row == nil {
		return &aggRow{raw: a.raw} // raw is never changed in place
	}
	c, r := agg.CloneWith[aggRow](a.row)
	c.row = r
	return c
}

// results writes the aggregates of a row that may be shared with a snapshot
// (so it is read, never decoded in place) into dst.
func (o *continuousOp) results(a *aggRow, dst map[string]any) error {
	if a.row != nil {
		a.row.Results(dst)
		return nil
	}
	if o.scratch == nil {
		o.scratch = agg.NewAccs(o.specs)
	}
	if err := o.scratch.UnmarshalCBOR(a.raw); err != nil {
		return &stateError{fmt.Errorf("restore the row of a continuous aggregate: %w", err)}
	}
	o.scratch.Results(dst)
	return nil
}

// Process folds each record into its key's row and emits the changes, in
// input order, in one batch.
func (o *continuousOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	o.out = o.out[:0]
	for i := range in {
		if err := o.record(&in[i]); err != nil {
			var se *stateError
			if errors.As(err, &se) {
				return err // not the record's fault: fail the task
			}
			if herr := o.errors.Handle(in[i], err); herr != nil {
				err := failAfter(out, o.out, herr)
				clear(o.out)
				o.out = o.out[:0]
				return err
			}
		}
	}
	clear(in) // the input records are consumed
	err := emit(out, o.out)
	clear(o.out) // let the emitted maps be collected
	o.out = o.out[:0]
	return err
}

// record folds r in and appends the changelog rows it causes to o.out. An
// error means r failed (the state is as before).
func (o *continuousOp) record(r *pipeline.Record) error {
	retract := false
	switch op := r.Fields[pipeline.OpField].(type) {
	case nil:
	case string:
		switch op {
		case pipeline.OpInsert, pipeline.OpUpdate:
		case pipeline.OpRetract, pipeline.OpDelete:
			retract = true
		default:
			return fmt.Errorf("%w: %s is %q; a changelog row has +I, -U, +U or -D", errBadOp, pipeline.OpField, op)
		}
	default:
		return fmt.Errorf("%w: %s is a %T; a changelog row has +I, -U, +U or -D", errBadOp, pipeline.OpField, op)
	}
	if err := o.decodeKey(r); err != nil {
		return err
	}

	var prev map[string]any
	prevRow, had := o.rows.Accumulator(r.Key, "")
	if had {
		prev = o.newMap()
		if err := o.results(prevRow, prev); err != nil {
			o.recycle(prev)
			return err
		}
	} else if retract {
		return fmt.Errorf("%w: %s %q", errRetractUnknown, pipeline.OpField, r.Fields[pipeline.OpField])
	}

	o.cur, o.err = nil, nil
	o.rows.Add(r.Key, "", continuousIn{fields: r.Fields, retract: retract})
	if o.fatal != nil {
		return o.fatal
	}
	if o.err != nil || o.cur == nil {
		// The row is unchanged (Add and Retract are atomic), but a new
		// key got an empty row: drop it.
		if !had {
			o.rows.Clear(r.Key, "")
		}
		o.recycle(prev)
		if o.err == nil { // the backend recorded why
			return &stateError{errors.New("the keyed state dropped the row")}
		}
		return o.err
	}

	if o.cur.row.Count() <= 0 {
		// Every record of the key was retracted: the row goes.
		o.rows.Clear(r.Key, "")
		o.appendRow(prev, r, pipeline.OpDelete)
		return nil
	}
	next := o.newMap()
	o.cur.row.Results(next)
	switch {
	case !had:
		o.appendRow(next, r, pipeline.OpInsert)
	case o.sameResults(prev, next):
		o.recycle(prev)
		o.recycle(next)
	default:
		o.appendRow(prev, r, pipeline.OpRetract)
		o.appendRow(next, r, pipeline.OpUpdate)
	}
	return nil
}

// appendRow completes a row with the key fields and op and appends it.
func (o *continuousOp) appendRow(m map[string]any, r *pipeline.Record, op string) {
	for i, n := range o.keyNames {
		m[n] = o.keyVals[i]
	}
	m[pipeline.OpField] = op
	o.out = append(o.out, pipeline.Record{Fields: m, Time: r.Time, Key: r.Key})
}

// decodeKey sets keyVals to the values of r's key, decoding it only when
// it differs from the previous record's. A single key that is a plain field
// holding the key's canonical value (a string, say) takes the record's own
// value, which costs no allocation.
func (o *continuousOp) decodeKey(r *pipeline.Record) error {
	key := r.Key
	if key == o.lastKey && key != "" {
		return nil
	}
	if !o.composite && o.keyNames[0] == o.keyField {
		if v, ok := r.Fields[o.keyField]; ok && canonicalKey(v) {
			o.keyBuf, _ = pipeline.EncodeKey(o.keyBuf[:0], v)
			if string(o.keyBuf) == key {
				o.keyVals[0], o.lastKey = v, key
				return nil
			}
		}
	}
	v, err := pipeline.DecodeKey(key)
	if err != nil {
		o.lastKey = ""
		return fmt.Errorf("key of a continuous aggregate: %w", err)
	}
	if !o.composite {
		o.keyVals[0] = v
	} else {
		l, ok := v.([]any)
		if !ok || len(l) != len(o.keyVals) {
			o.lastKey = ""
			return fmt.Errorf("key of a continuous aggregate: %w: want %d values, got %v", pipeline.ErrBadKey, len(o.keyVals), v)
		}
		copy(o.keyVals, l)
	}
	o.lastKey = key
	return nil
}

// canonicalKey reports whether v is a value that pipeline.DecodeKey returns
// as is: a string, bool, int64, nil or a float that is not integral.
func canonicalKey(v any) bool {
	switch x := v.(type) {
	case nil, string, bool, int64:
		return true
	case float64:
		return x != math.Trunc(x) || math.Abs(x) >= 1<<63
	}
	return false
}

// sameResults reports whether two result maps hold equal aggregates.
func (o *continuousOp) sameResults(a, b map[string]any) bool {
	for i := range o.specs {
		n := o.specs[i].Name
		if !sameValue(a[n], b[n]) {
			return false
		}
	}
	return true
}

// sameValue compares aggregate results: scalars with ==, lists and maps
// element by element. NaN differs from itself, so a NaN result is emitted.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case int:
		y, ok := b.(int)
		return ok && x == y
	}
	return reflect.DeepEqual(a, b)
}

// newMap returns an empty map for an output row.
func (o *continuousOp) newMap() map[string]any {
	if n := len(o.free); n > 0 {
		m := o.free[n-1]
		o.free = o.free[:n-1]
		return m
	}
	return make(map[string]any, o.width)
}

// recycle keeps a map that was not emitted for the next row.
func (o *continuousOp) recycle(m map[string]any) {
	if m == nil || len(o.free) >= 4 {
		return
	}
	clear(m)
	o.free = append(o.free, m)
}

// stateError is a failure of the keyed state rather than of a record (a
// restored row that does not decode into the specs): it fails the task
// whatever the step's on_error.
type stateError struct{ err error }

func (e *stateError) Error() string { return e.err.Error() }
func (e *stateError) Unwrap() error { return e.err }

// aggRow is the state of one key: its row, or, right after a restore, the
// row's encoding until the row is first written (decoding needs the specs,
// which the CBOR decoder does not have).
type aggRow struct {
	row *agg.Row
	raw []byte
}

// MarshalCBOR encodes the row; snapshots use AppendCBOR.
func (a *aggRow) MarshalCBOR() ([]byte, error) {
	if a.row == nil {
		return a.raw, nil
	}
	return a.row.MarshalCBOR()
}

// AppendCBOR appends what MarshalCBOR returns to dst: snapshots encode one
// row per key straight into their buffer (statestore.CBORAppender).
func (a *aggRow) AppendCBOR(dst []byte) ([]byte, error) {
	if a.row == nil {
		return append(dst, a.raw...), nil
	}
	return a.row.AppendCBOR(dst)
}

// PrefetchHeld asks for the strings that the row holds
// (statestore.HeldPrefetcher); nothing for a restored row not yet decoded.
func (a *aggRow) PrefetchHeld(level int) {
	if a != nil {
		a.row.PrefetchHeld(level)
	}
}

var (
	_ statestore.CBORAppender   = (*aggRow)(nil)
	_ statestore.HeldPrefetcher = (*aggRow)(nil)
)

// UnmarshalCBOR keeps a restored row's encoding; the operator decodes it
// against its specs on first use.
func (a *aggRow) UnmarshalCBOR(data []byte) error {
	a.row, a.raw = nil, bytes.Clone(data)
	return nil
}
