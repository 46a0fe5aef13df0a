package operators

import (
	"context"
	"errors"

	"github.com/eddy-stream/eddy/pipeline"
)

// windowJoin is the window join of one subtask (docs/joins.md).
type windowJoin struct {
	joinBase
}

func newWindowJoin(p *joinPlan) *windowJoin { return &windowJoin{joinBase: joinBase{plan: p}} }

// Open sets up the shared parts and registers the join's state.
func (j *windowJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	return j.open(oc)
}

// Process is not called: the runtime calls ProcessInput.
func (j *windowJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput joins records of one side.
func (j *windowJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	return errors.New("window join: not implemented yet")
}
