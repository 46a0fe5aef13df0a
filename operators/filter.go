package operators

import (
	"fmt"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "filter",
		Summary: "keep the records for which a bool expression is true",
		New:     func() pipeline.StepConfig { return &FilterConfig{} },
	})
}

// FilterConfig is a `filter:` step.
//
//	steps:
//	  - id: hot
//	    filter: temp_c > 30
type FilterConfig struct {
	// Filter is the predicate; the loader rejects an expression whose type
	// is known not to be bool.
	Filter expr.Expr `yaml:"filter" expr:"bool"`
}

// Validate requires the expression.
func (c *FilterConfig) Validate() error {
	if !c.Filter.IsSet() {
		return pipeline.FieldErr("filter", "give a bool expression, e.g. filter: temp > 30")
	}
	return nil
}

// NewOperator returns the filter of one subtask.
func (c *FilterConfig) NewOperator() (pipeline.Operator, error) {
	return &filterOp{pred: &c.Filter}, nil
}

type filterOp struct {
	exprOp
	pred *expr.Expr
}

// Process keeps the records whose predicate is true, compacted to the front
// of in, and emits them. The loader compiles the predicate as a bool, so a
// nil result (a missing field) is false; a record whose predicate fails, or
// is not a bool where it was compiled without that (expr.MustExpr), goes to
// on_error.
func (o *filterOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	kept := 0
	for i := range in {
		v, err := o.vm.EvalRecord(o.pred, in[i].Fields, in[i].Meta)
		if err != nil {
			err = &evalError{kind: "filter", src: o.pred.Source, err: err}
		} else if b, ok := v.(bool); !ok {
			err = fmt.Errorf("%w: filter expression %q returned %s, not a bool", ErrResultType, o.pred.Source, describe(v))
		} else if !b {
			continue
		} else {
			in[kept] = in[i]
			kept++
			continue
		}
		if herr := o.errors.Handle(in[i], err); herr != nil {
			clear(in[kept:])
			return failAfter(out, in[:kept], herr)
		}
	}
	clear(in[kept:]) // let dropped records be collected
	return emit(out, in[:kept])
}

// describe names a value's type for messages: "nil" rather than "<nil>".
func describe(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("%T", v)
}
