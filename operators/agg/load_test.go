package agg

import (
	"errors"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// aggStep is a step kind that only declares aggregates, to check how the
// loader reports their problems.
type aggStep struct {
	Kind      string `yaml:"aggs"`
	Aggregate Specs  `yaml:"aggregate"`
}

func (c *aggStep) Validate() error { return c.Aggregate.Compile() }
func (c *aggStep) NewOperator() (pipeline.Operator, error) {
	return nil, errors.New("the test step does not run")
}

type nopConfig struct{}

func (*nopConfig) Validate() error                     { return nil }
func (*nopConfig) NewSource() (pipeline.Source, error) { return nil, errors.New("does not run") }
func (*nopConfig) NewSink() (pipeline.Sink, error)     { return nil, errors.New("does not run") }

func loadAggregate(aggregate string) (*pipeline.Spec, error) {
	env := pipeline.NewEnv()
	env.RegisterStep(pipeline.StepPlugin{Kind: "aggs", New: func() pipeline.StepConfig { return &aggStep{} }})
	env.RegisterSource(pipeline.SourcePlugin{Type: "test", New: func() pipeline.SourceConfig { return &nopConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "test", New: func() pipeline.SinkConfig { return &nopConfig{} }})
	text := "version: 1\nname: t\nsources:\n  - id: in\n    type: test\nsteps:\n  - id: s\n    aggs: x\n    aggregate:\n" +
		aggregate + "sinks:\n  - id: out\n    type: test\n"
	return pipeline.Load(env, "t.yaml", []byte(text))
}

// The aggregate mapping starts on line 10 of t.yaml, indented 6.
func TestLoaderPositions(t *testing.T) {
	for _, tc := range []struct{ aggregate, want string }{
		{"      n: count()\n      m: max(temp *)\n", `t.yaml:11:19: expression "temp *": unexpected token EOF`},
		{"      p: \"reduce(acc * x, 1, acc * y)\"\n",
			`t.yaml:10:10: aggregate.p: reduce(acc * x, 1, acc * y): merge "acc * y": unknown name y: ` +
				`the merge expression combines two partial results, acc (the earlier) and other (the later)`},
		{"      n: count()\n      m: mean(x)\n",
			`t.yaml:10:7: aggregate: m: unknown aggregate function "mean" (did you mean avg?); ` +
				`the functions are avg, collect, count, count_distinct, first, last, max, min, reduce, sum`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := loadAggregate(tc.aggregate)
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
	spec, err := loadAggregate("      n: count()\n      a: avg(temp)\n")
	require.NoError(t, err)
	specs := spec.Steps[0].Config.(*aggStep).Aggregate
	require.True(t, specs.Compiled())
	require.Equal(t, "n=count();a=avg(temp)", specs.Signature())
}
