package operators

import (
	"context"

	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "drop",
		Summary: "remove fields from each record",
		New:     func() pipeline.StepConfig { return &DropConfig{} },
	})
}

// DropConfig is a `drop:` step: one field name or a list of them.
//
//	steps:
//	  - id: anonymise
//	    drop: [email, phone]
type DropConfig struct {
	Drop pipeline.StringList `yaml:"drop"`
}

// Validate requires at least one name; names are top-level, without '.'.
func (c *DropConfig) Validate() error {
	if len(c.Drop) == 0 {
		return pipeline.FieldErr("drop", "give a field name or a list of them, e.g. drop: [email, phone]")
	}
	return checkFieldNames("drop", c.Drop)
}

// NewOperator returns the drop operator of one subtask.
func (c *DropConfig) NewOperator() (pipeline.Operator, error) {
	return &dropOp{names: c.Drop}, nil
}

type dropOp struct {
	names []string
}

func (o *dropOp) Open(context.Context, *pipeline.OperatorContext) error { return nil }
func (o *dropOp) Close() error                                          { return nil }

// Process deletes the fields in place; a missing field is not an error, so
// drop never fails a record.
func (o *dropOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	for i := range in {
		for _, n := range o.names {
			delete(in[i].Fields, n)
		}
	}
	return emit(out, in)
}
