package operators

import (
	"context"
	"errors"
	"fmt"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/operators/agg"
	"github.com/eddy-stream/eddy/pipeline"
	"go.yaml.in/yaml/v3"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "key_by",
		Summary: "hash-partition the stream by a key expression (or a list of them), optionally into windows or a continuous aggregate",
		New:     func() pipeline.StepConfig { return &KeyByConfig{} },
	})
}

// KeyByConfig is a `key_by:` step. The runtime evaluates the key on the
// sending side of the step's input edge, hash-partitions by it and sets
// Record.Key. A bare key_by then passes its input through; with `window`
// and `aggregate` it computes a result per key and window (window.go,
// docs/windows.md); with `aggregate` alone it keeps a continuous aggregate
// per key (continuous.go).
//
//	steps:
//	  - id: per_sensor
//	    key_by: sensor_id            # or [region, sensor_id]
//	    window: { type: tumbling, size: 10s }
//	    allowed_lateness: 5s
//	    late_output: late_readings
//	    aggregate:
//	      n: count()
//	      avg_c: avg(temp_c)
type KeyByConfig struct {
	KeyBy KeyList `yaml:"key_by"`
	// Window assigns records to windows; nil: no window.
	Window *WindowSpec `yaml:"window"`
	// Aggregate is what a window (or the continuous aggregate) computes.
	Aggregate agg.Specs `yaml:"aggregate"`
	// AllowedLateness keeps a fired event-time window's state this long
	// (in event time) so that late records update it; nil: not given (0).
	AllowedLateness *pipeline.Duration `yaml:"allowed_lateness"`
	// LateOutput names the side stream that gets late records; "": they
	// are dropped and counted.
	LateOutput string `yaml:"late_output"`
	// Trigger adds firings to a window's own: early results, or the
	// firings of a global window.
	Trigger *TriggerSpec `yaml:"trigger"`

	// plan is the window resolved by Validate.
	plan *windowPlan
}

// KeyList is one expression or a list of them (a composite key).
type KeyList []expr.Expr

// UnmarshalYAML accepts a scalar expression or a list of them.
func (l *KeyList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var e expr.Expr
		if err := e.UnmarshalYAML(n); err != nil {
			return err
		}
		*l = KeyList{e}
		return nil
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			return errors.New("give at least one key expression")
		}
		out := make(KeyList, len(n.Content))
		for i, c := range n.Content {
			if err := out[i].UnmarshalYAML(c); err != nil {
				return fmt.Errorf("key %d: %w", i+1, err)
			}
		}
		*l = out
		return nil
	}
	return errors.New("must be an expression or a list of expressions")
}

// Validate requires a key and checks the window, aggregate, lateness and
// trigger keys (see validateWindow).
func (c *KeyByConfig) Validate() error {
	if len(c.KeyBy) == 0 {
		return pipeline.FieldErr("key_by", "give a key expression or a list of them, e.g. key_by: sensor_id")
	}
	if err := c.validateWindow(); err != nil {
		return err
	}
	if c.Window == nil && len(c.Aggregate) > 0 {
		return validateContinuousAggregate(c)
	}
	return nil
}

// KeyExprs implements pipeline.KeyedStep.
func (c *KeyByConfig) KeyExprs(int) []*expr.Expr {
	out := make([]*expr.Expr, len(c.KeyBy))
	for i := range c.KeyBy {
		out[i] = &c.KeyBy[i]
	}
	return out
}

// Stateful implements pipeline.StatefulStep: a bare key_by keeps no
// state; a window or a continuous aggregate does.
func (c *KeyByConfig) Stateful() bool { return c.Window != nil || len(c.Aggregate) > 0 }

// SideOutputs implements pipeline.SideOutputter: late_output names the
// side output "late" of a window step.
func (c *KeyByConfig) SideOutputs() map[string]string {
	if c.LateOutput == "" {
		return nil
	}
	return map[string]string{c.LateOutput: lateSide}
}

// NewOperator returns the operator of one subtask: a window operator with
// `window`, a continuous aggregate with `aggregate` alone, else the
// pass-through.
func (c *KeyByConfig) NewOperator() (pipeline.Operator, error) {
	switch {
	case c.Window != nil:
		return newWindowOp(c)
	case len(c.Aggregate) > 0:
		return newContinuousAggregate(c)
	}
	return keyByOp{}, nil
}

// keyByOp is a bare key_by: partitioning happened on the input edge, so the
// records (with their Key) go on unchanged.
type keyByOp struct{}

func (keyByOp) Open(context.Context, *pipeline.OperatorContext) error { return nil }
func (keyByOp) Close() error                                          { return nil }

func (keyByOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	return emit(out, in)
}
