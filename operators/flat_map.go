package operators

import (
	"fmt"
	"maps"
	"reflect"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "flat_map",
		Summary: "turn each record into zero or more records, one per element of a list expression",
		New:     func() pipeline.StepConfig { return &FlatMapConfig{} },
	})
}

// FlatMapConfig is a `flat_map:` step.
//
//	steps:
//	  - id: items
//	    flat_map: 'map(items, ({"order": order_id, "sku": #.sku}))'
type FlatMapConfig struct {
	// FlatMap returns a list (or nil, for no records).
	FlatMap expr.Expr `yaml:"flat_map"`
}

// Validate requires the expression and rejects one whose type is known at
// load time and is not a list (`flat_map: 1 + 2`).
func (c *FlatMapConfig) Validate() error {
	if !c.FlatMap.IsSet() {
		return pipeline.FieldErr("flat_map", "give an expression that returns a list, e.g. flat_map: items")
	}
	if p := c.FlatMap.Program(); p != nil {
		if t := p.Node().Type(); t != nil {
			switch t.Kind() {
			case reflect.Slice, reflect.Array, reflect.Interface:
			default:
				return pipeline.FieldErr("flat_map", "expression %q returns %s, not a list", c.FlatMap.Source, t)
			}
		}
	}
	return nil
}

// NewOperator returns the flat_map operator of one subtask.
func (c *FlatMapConfig) NewOperator() (pipeline.Operator, error) {
	return &flatMapOp{list: &c.FlatMap}, nil
}

type flatMapOp struct {
	exprOp
	list *expr.Expr
	// out collects a batch's output; reused across batches.
	out []pipeline.Record
}

// Process emits one record per element of each record's list, in order: a
// map[string]any element becomes the record's fields (a copy, since the
// element may be shared with the input), any other element becomes
// {"value": element}. Output records keep the input's Time, Key and Meta. A
// nil result emits nothing; a result that is not a list goes to on_error.
func (o *flatMapOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	o.out = o.out[:0]
	for i := range in {
		v, err := o.vm.EvalRecord(o.list, in[i].Fields, in[i].Meta)
		if err != nil {
			err = &evalError{kind: "flat_map", src: o.list.Source, err: err}
		} else {
			err = o.expand(&in[i], v)
		}
		if err != nil {
			if herr := o.errors.Handle(in[i], err); herr != nil {
				err := failAfter(out, o.out, herr)
				clear(o.out)
				return err
			}
		}
	}
	err := emit(out, o.out)
	clear(o.out) // the emitter keeps the records it needs, not the slice
	return err
}

// expand appends the records of one input record's result v to o.out.
func (o *flatMapOp) expand(rec *pipeline.Record, v any) error {
	switch l := v.(type) {
	case nil:
		return nil
	case []any:
		for _, e := range l {
			o.out = append(o.out, element(rec, e))
		}
		return nil
	}
	rv := reflect.ValueOf(v)
	if k := rv.Kind(); k != reflect.Slice && k != reflect.Array {
		return fmt.Errorf("%w: flat_map expression %q returned %s, not a list", ErrResultType, o.list.Source, describe(v))
	}
	for j := range rv.Len() {
		o.out = append(o.out, element(rec, rv.Index(j).Interface()))
	}
	return nil
}

func element(rec *pipeline.Record, e any) pipeline.Record {
	var f map[string]any
	if m, ok := e.(map[string]any); ok {
		f = maps.Clone(m)
		if f == nil {
			f = map[string]any{}
		}
	} else {
		f = map[string]any{"value": e}
	}
	return pipeline.Record{Fields: f, Time: rec.Time, Key: rec.Key, Meta: rec.Meta}
}
