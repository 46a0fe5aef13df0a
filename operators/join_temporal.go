package operators

import (
	"context"
	"errors"

	"github.com/eddy-stream/eddy/pipeline"
)

// temporalJoin is the temporal join of one subtask (docs/joins.md).
type temporalJoin struct {
	joinBase
}

func newTemporalJoin(p *joinPlan) *temporalJoin { return &temporalJoin{joinBase: joinBase{plan: p}} }

// Open sets up the shared parts and registers the join's state.
func (j *temporalJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	return j.open(oc)
}

// Process is not called: the runtime calls ProcessInput.
func (j *temporalJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput joins records of one side.
func (j *temporalJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	return errors.New("temporal join: not implemented yet")
}
