package operators

import (
	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "set",
		Summary: "add or overwrite fields from expressions, keeping the other fields",
		New:     func() pipeline.StepConfig { return &SetConfig{} },
	})
}

// SetConfig is a `set:` step.
//
//	steps:
//	  - id: celsius
//	    set:
//	      temp_c: (temp - 32) * 5 / 9
//	      hot: temp_c > 30      # sees temp_c set just above
type SetConfig struct {
	// Set lists the fields to assign, in order.
	Set expr.Map `yaml:"set"`
}

// Validate requires at least one field; names are top-level, without '.'.
func (c *SetConfig) Validate() error {
	if len(c.Set) == 0 {
		return pipeline.FieldErr("set", "give at least one field: expression, e.g. set: {temp_c: (temp - 32) * 5 / 9}")
	}
	return checkFieldNames("set", exprNames(c.Set))
}

// NewOperator returns the set operator of one subtask.
func (c *SetConfig) NewOperator() (pipeline.Operator, error) {
	return &setOp{fields: c.Set, prior: make([]priorValue, len(c.Set))}, nil
}

type setOp struct {
	exprOp
	fields expr.Map // shared by all subtasks, read only
	// prior holds, while one record is processed, the values that fields
	// 0..n-2 had before this step assigned them, to restore a record whose
	// later expression fails.
	prior []priorValue
}

type priorValue struct {
	v   any
	had bool
}

// Process assigns the fields of each record in place, in order, so a later
// expression sees the fields set by earlier ones. A record whose expression
// fails is restored to what it was (the dead letter shows the input record)
// and goes to on_error.
func (o *setOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	last := len(o.fields) - 1
	kept := 0
	for i := range in {
		f := in[i].Fields
		if f == nil {
			f = make(map[string]any, len(o.fields))
			in[i].Fields = f
		}
		var err error
		for j := range o.fields {
			e := &o.fields[j]
			v, eerr := o.vm.EvalRecord(&e.Expr, in[i].Fields, in[i].Meta)
			if eerr != nil {
				o.restore(f, j)
				err = &evalError{kind: "set", field: e.Name, src: e.Expr.Source, err: eerr}
				break
			}
			if j < last { // the last field is never restored: nothing can fail after it
				old, had := f[e.Name]
				o.prior[j] = priorValue{v: old, had: had}
			}
			f[e.Name] = v
		}
		if err != nil {
			if herr := o.errors.Handle(in[i], err); herr != nil {
				clear(o.prior)
				clear(in[kept:])
				return failAfter(out, in[:kept], herr)
			}
			continue
		}
		in[kept] = in[i]
		kept++
	}
	clear(o.prior)
	clear(in[kept:])
	return emit(out, in[:kept])
}

// restore undoes the assignments of fields 0..n-1, last first.
func (o *setOp) restore(f map[string]any, n int) {
	for j := n - 1; j >= 0; j-- {
		if p := o.prior[j]; p.had {
			f[o.fields[j].Name] = p.v
		} else {
			delete(f, o.fields[j].Name)
		}
	}
}
