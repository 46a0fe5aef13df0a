package operators

import (
	"context"
	"errors"
	"fmt"

	"github.com/eddy-stream/eddy/pipeline"
	"go.yaml.in/yaml/v3"
)

func init() {
	register(pipeline.StepPlugin{
		Kind:    "key_by",
		Summary: "hash-partition the stream by a key expression (or a list of them, for a composite key)",
		New:     func() pipeline.StepConfig { return &KeyByConfig{} },
	})
}

// KeyByConfig is a `key_by:` step. The runtime evaluates the key on the
// sending side of the step's input edge, hash-partitions by it and sets
// Record.Key; a bare key_by then passes its input through.
//
//	steps:
//	  - id: per_sensor
//	    key_by: sensor_id            # or [region, sensor_id]
type KeyByConfig struct {
	KeyBy KeyList `yaml:"key_by"`
}

// KeyList is one expression or a list of them (a composite key).
type KeyList []pipeline.Expr

// UnmarshalYAML accepts a scalar expression or a list of them.
func (l *KeyList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var e pipeline.Expr
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

// Validate requires a key.
func (c *KeyByConfig) Validate() error {
	if len(c.KeyBy) == 0 {
		return pipeline.FieldErr("key_by", "give a key expression or a list of them, e.g. key_by: sensor_id")
	}
	return nil
}

// KeyExprs implements pipeline.KeyedStep.
func (c *KeyByConfig) KeyExprs() []*pipeline.Expr {
	out := make([]*pipeline.Expr, len(c.KeyBy))
	for i := range c.KeyBy {
		out[i] = &c.KeyBy[i]
	}
	return out
}

// NewOperator returns the pass-through of one subtask.
func (c *KeyByConfig) NewOperator() (pipeline.Operator, error) {
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
