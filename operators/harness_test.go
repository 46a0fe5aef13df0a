package operators

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// Test-only source and sink types: the loader needs a source to read from and
// a sink to write to; nothing here runs them.
type (
	testSourceConfig struct{}
	testSinkConfig   struct{}
)

func (*testSourceConfig) Validate() error { return nil }
func (*testSourceConfig) NewSource() (pipeline.Source, error) {
	return nil, errors.New("the test source does not run")
}
func (*testSinkConfig) Validate() error { return nil }
func (*testSinkConfig) NewSink() (pipeline.Sink, error) {
	return nil, errors.New("the test sink does not run")
}

// testEnv returns an isolated Env: this package's step kinds plus a "test"
// source and sink.
func testEnv() *pipeline.Env {
	env := pipeline.NewEnv()
	Register(env)
	env.RegisterSource(pipeline.SourcePlugin{Type: "test", New: func() pipeline.SourceConfig { return &testSourceConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "test", New: func() pipeline.SinkConfig { return &testSinkConfig{} }})
	return env
}

// header comes before the steps of every test pipeline, so the first line of
// a test's steps text is line 7 of t.yaml.
const header = `version: 1
name: t
sources:
  - id: in
    type: test
steps:
`

// loadSteps loads a pipeline whose steps section is steps (indented list
// items). When a step sets on_error: dead_letter, a sink reads "s.errors".
func loadSteps(steps string) (*pipeline.Spec, error) {
	text := header + steps + "sinks:\n  - id: out\n    type: test\n"
	if strings.Contains(steps, "dead_letter") {
		text += "  - id: dead\n    type: test\n    from: s.errors\n"
	}
	return pipeline.Load(testEnv(), "t.yaml", []byte(text))
}

// collector is an Emitter that keeps copies of what it gets.
type collector struct {
	records []pipeline.Record
	emits   int
}

func (c *collector) Emit(b []pipeline.Record) error {
	c.emits++
	c.records = append(c.records, b...)
	return nil
}

// harness drives the operator of the single step with id "s".
type harness struct {
	t       testing.TB
	spec    *pipeline.Spec
	step    *pipeline.StepSpec
	op      pipeline.Operator
	info    pipeline.SubtaskInfo
	metrics *pipeline.Metrics
	dead    *collector
}

func newHarness(t testing.TB, steps string) *harness {
	t.Helper()
	spec, err := loadSteps(steps)
	require.NoError(t, err)
	var step *pipeline.StepSpec
	for _, s := range spec.Steps {
		if s.ID == "s" {
			step = s
		}
	}
	require.NotNil(t, step, "no step with id s")
	op, err := step.Config.NewOperator()
	require.NoError(t, err)
	h := &harness{t: t, spec: spec, step: step, op: op, metrics: pipeline.NewMetrics(), dead: &collector{}}
	h.info = pipeline.SubtaskInfo{ID: step.ID, Parallelism: 1, MaxParallelism: 128, PipelineName: spec.Name, Logger: slog.Default(), Metrics: h.metrics}
	oc := &pipeline.OperatorContext{
		SubtaskInfo: h.info,
		Errors:      pipeline.NewErrorHandler(h.info, step.OnError, h.dead),
		Side: func(name string) pipeline.Emitter {
			t.Errorf("unexpected side output %q", name)
			return &collector{}
		},
	}
	require.NoError(t, op.Open(context.Background(), oc))
	t.Cleanup(func() { require.NoError(t, op.Close()) })
	return h
}

// process runs one batch through the operator.
func (h *harness) process(in ...pipeline.Record) (*collector, error) {
	out := &collector{}
	err := h.op.Process(in, out)
	require.LessOrEqual(h.t, out.emits, 1, "an operator emits at most once per batch")
	if len(out.records) == 0 {
		require.Zero(h.t, out.emits, "an operator does not emit an empty batch")
	}
	return out, err
}

// errorCount returns the record-errors counter of the step's policy.
func (h *harness) errorCount() float64 {
	return pipeline.CounterValue(h.metrics.RecordErrors(h.info, h.step.OnError))
}

// rec returns a record without event time.
func rec(fields map[string]any) pipeline.Record { return pipeline.NewRecord(fields) }

type fields = map[string]any
