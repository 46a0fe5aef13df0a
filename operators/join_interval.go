package operators

import (
	"context"
	"errors"

	"github.com/eddy-stream/eddy/pipeline"
)

// intervalJoin is the interval join of one subtask (docs/joins.md).
type intervalJoin struct {
	joinBase
}

func newIntervalJoin(p *joinPlan) *intervalJoin { return &intervalJoin{joinBase: joinBase{plan: p}} }

// Open sets up the shared parts and registers the join's state.
func (j *intervalJoin) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	return j.open(oc)
}

// Process is not called: the runtime calls ProcessInput.
func (j *intervalJoin) Process([]pipeline.Record, pipeline.Emitter) error {
	return errors.New("join: records must say their input")
}

// ProcessInput joins records of one side.
func (j *intervalJoin) ProcessInput(side int, in []pipeline.Record, out pipeline.Emitter) error {
	return errors.New("interval join: not implemented yet")
}
