package pipeline_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// pairConfig is a two-input step: it names its inputs in its own keys
// (InputDeclarer), partitions each by its own key expression and tags
// every record with the input it came from (MultiInputOperator).
type pairConfig struct {
	Pair struct {
		A    string    `yaml:"a"`
		B    string    `yaml:"b"`
		KeyA expr.Expr `yaml:"key_a"`
		KeyB expr.Expr `yaml:"key_b"`
	} `yaml:"pair"`
}

func (c *pairConfig) Validate() error { return nil }
func (c *pairConfig) KeyExprs(input int) []*expr.Expr {
	if input == 1 {
		return []*expr.Expr{&c.Pair.KeyB}
	}
	return []*expr.Expr{&c.Pair.KeyA}
}
func (c *pairConfig) InputStreams() []pipeline.DeclaredInput {
	return []pipeline.DeclaredInput{{Path: []string{"pair", "a"}, Stream: c.Pair.A}, {Path: []string{"pair", "b"}, Stream: c.Pair.B}}
}
func (c *pairConfig) NewOperator() (pipeline.Operator, error) { return &pairOp{}, nil }

type pairOp struct{ sub int }

func (o *pairOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	o.sub = oc.Subtask
	return nil
}
func (o *pairOp) Process([]pipeline.Record, pipeline.Emitter) error {
	panic("a multi-input operator gets ProcessInput")
}
func (o *pairOp) ProcessInput(input int, in []pipeline.Record, out pipeline.Emitter) error {
	for _, r := range in {
		r.Fields["input"] = input
		r.Fields["at"] = o.sub
		r.Fields["key"] = pipeline.FormatKey(r.Key)
	}
	return out.Emit(in)
}
func (o *pairOp) Close() error { return nil }

// A step that declares its inputs gets each input's records through
// ProcessInput with that input's index, partitioned by that input's own
// key: records whose keys are equal meet on one subtask whichever input
// they came from.
func TestMultiInputStep(t *testing.T) {
	env := testEnv()
	env.RegisterStep(pipeline.StepPlugin{Kind: "pair", New: func() pipeline.StepConfig { return &pairConfig{} }})
	spec, err := pipeline.Load(env, "test.yaml", []byte(`
version: 1
name: pair
sources:
  - id: a
    type: seq
    count: 3000
    keys: 10
    parallelism: 2
  - id: b
    type: seq
    count: 2000
    keys: 10
steps:
  - id: p
    pair: {a: a, b: b, key_a: k, key_b: 9 - k}
    parallelism: 3
sinks:
  - id: out
    type: collect
    parallelism: 3
`))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	col := newCollector()
	spec.Sinks[0].Config.(*collectConfig).c = col
	for i, e := range plan.Node("p").Inputs {
		require.Equal(t, pipeline.Hash, e.Partition)
		require.Equal(t, i, e.Input)
	}
	run(t, plan)

	got := col.all()
	require.Len(t, got, 5000)
	perInput := [2]int{}
	subOfKey := map[string]any{}
	for _, r := range got {
		in := r["input"].(int)
		perInput[in]++
		k := r["k"].(int)
		want := k
		if in == 1 {
			want = 9 - k
		}
		require.Equal(t, pipeline.FormatKey(mustKey(t, want)), r["key"], "input %d is keyed by its own expression", in)
		if prev, ok := subOfKey[r["key"].(string)]; ok {
			require.Equal(t, prev, r["at"], "key %s on two subtasks", r["key"])
		}
		subOfKey[r["key"].(string)] = r["at"]
	}
	require.Equal(t, [2]int{3000, 2000}, perInput)
}

func mustKey(t *testing.T, v any) string {
	k, err := pipeline.EncodeKey(nil, v)
	require.NoError(t, err)
	return string(k)
}

// A step that declares its inputs rejects from, and reports an unknown
// input at its key.
func TestMultiInputStepWiring(t *testing.T) {
	env := testEnv()
	env.RegisterStep(pipeline.StepPlugin{Kind: "pair", New: func() pipeline.StepConfig { return &pairConfig{} }})
	_, err := pipeline.Load(env, "test.yaml", []byte(`version: 1
name: pair
sources:
  - id: a
    type: seq
steps:
  - id: p
    from: a
    pair:
      a: a
      b: bb
sinks:
  - id: out
    type: collect
`))
	require.EqualError(t, err, `test.yaml:8:11: step "p": a pair step names its inputs in pair.a and pair.b, not from
test.yaml:11:10: step "p": pair.b "bb": no source, step or side stream has that id (did you mean "a"?)`)
}
