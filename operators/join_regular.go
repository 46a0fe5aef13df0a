package operators

import (
	"context"
	"errors"

	"github.com/eddy-stream/eddy/pipeline"
)

// regularJoin is the regular join of one subtask (docs/joins.md).
type regularJoin struct {
	joinBase
}

func newRegularJoin(p *joinPlan) *regularJoin { return &regularJoin{joinBase: joinBase{plan: p}} }

// Open sets up the shared parts and registers the join's state.
func (j *regularJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	return j.open(oc)
}

// Process is not called: the runtime calls ProcessInput.
func (j *regularJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput joins records of one side.
func (j *regularJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	return errors.New("regular join: not implemented yet")
}
