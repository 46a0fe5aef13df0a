package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
	"github.com/stretchr/testify/require"
)

// Test components: a source of numbered records, a collecting sink, and the
// smallest steps the runtime tests need. They register into an isolated Env.

// collector gathers what sinks received, per sink subtask.
type collector struct {
	mu      sync.Mutex
	bySub   map[int][]map[string]any
	delay   time.Duration
	written chan int
}

func newCollector() *collector { return &collector{bySub: map[int][]map[string]any{}} }

func (c *collector) all() []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for sub := range len(c.bySub) + 8 {
		out = append(out, c.bySub[sub]...)
	}
	return out
}

type collectConfig struct {
	c *collector
}

func (c *collectConfig) Validate() error { return nil }
func (c *collectConfig) NewSink() (pipeline.Sink, error) {
	return &collectSink{c: c.c}, nil
}

type collectSink struct {
	c   *collector
	sub int
}

func (s *collectSink) Open(_ context.Context, sc *pipeline.SinkContext) error {
	s.sub = sc.Subtask
	return nil
}

func (s *collectSink) Write(_ context.Context, b []pipeline.Record) error {
	if s.c.delay > 0 {
		time.Sleep(s.c.delay)
	}
	s.c.mu.Lock()
	for _, r := range b {
		s.c.bySub[s.sub] = append(s.c.bySub[s.sub], r.Fields)
	}
	s.c.mu.Unlock()
	if s.c.written != nil {
		s.c.written <- len(b)
	}
	return nil
}
func (s *collectSink) Flush(context.Context) error { return nil }
func (s *collectSink) Close(context.Context) error { return nil }

// keyStep partitions by key and tags records with the subtask that saw them.
type keyStepConfig struct {
	Key expr.Expr `yaml:"keyed"`
}

func (c *keyStepConfig) Validate() error                         { return nil }
func (c *keyStepConfig) KeyExprs(int) []*expr.Expr               { return []*expr.Expr{&c.Key} }
func (c *keyStepConfig) NewOperator() (pipeline.Operator, error) { return &tagOp{}, nil }

type tagOp struct{ sub int }

func (o *tagOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	o.sub = oc.Subtask
	return nil
}
func (o *tagOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	for _, r := range in {
		r.Fields["at"] = o.sub
		r.Fields["key"] = pipeline.FormatKey(r.Key)
	}
	return out.Emit(in)
}
func (o *tagOp) Close() error { return nil }

// passStep adds one to n, or fails on n == fail_on.
type passConfig struct {
	FailOn *int `yaml:"pass"`
}

func (c *passConfig) Validate() error                         { return nil }
func (c *passConfig) NewOperator() (pipeline.Operator, error) { return &passOp{failOn: c.FailOn}, nil }

type passOp struct {
	failOn *int
	errs   *pipeline.ErrorHandler
}

func (o *passOp) Open(_ context.Context, oc *pipeline.OperatorContext) error {
	o.errs = oc.Errors
	return nil
}
func (o *passOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	n := 0
	for _, r := range in {
		if o.failOn != nil && r.Fields["n"] == *o.failOn {
			if err := o.errs.Handle(r, errors.New("boom")); err != nil {
				return err
			}
			continue
		}
		r.Fields["passed"] = true
		in[n] = r
		n++
	}
	return out.Emit(in[:n])
}
func (o *passOp) Close() error { return nil }

// whereStep keeps records matching a predicate.
type whereConfig struct {
	Where expr.Expr `yaml:"where" expr:"bool"`
	Limit int       `yaml:"limit"`
}

func (c *whereConfig) Validate() error {
	if c.Limit < 0 {
		return pipeline.FieldErr("limit", "must not be negative")
	}
	return nil
}
func (c *whereConfig) NewOperator() (pipeline.Operator, error) { return &passOp{}, nil }

// wmLog passes records on and emits {"wm": W} at every watermark it sees.
type wmLogConfig struct {
	Log bool `yaml:"wmlog"`
}

func (c *wmLogConfig) Validate() error                         { return nil }
func (c *wmLogConfig) NewOperator() (pipeline.Operator, error) { return &wmLogOp{}, nil }

type wmLogOp struct{}

func (o *wmLogOp) Open(context.Context, *pipeline.OperatorContext) error { return nil }
func (o *wmLogOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	for _, r := range in {
		r.Fields["ts"] = r.Time
	}
	return out.Emit(in)
}
func (o *wmLogOp) OnWatermark(wm int64, out pipeline.Emitter) error {
	return out.Emit([]pipeline.Record{pipeline.NewRecord(map[string]any{"wm": wm})})
}
func (o *wmLogOp) Close() error { return nil }

// opsStep tags records with changelog kinds by n % 3: +I, -U, +U.
type opsConfig struct {
	Ops bool `yaml:"ops"`
}

func (c *opsConfig) Validate() error                         { return nil }
func (c *opsConfig) NewOperator() (pipeline.Operator, error) { return &opsOp{}, nil }

type opsOp struct{}

func (o *opsOp) Open(context.Context, *pipeline.OperatorContext) error { return nil }
func (o *opsOp) Process(in []pipeline.Record, out pipeline.Emitter) error {
	kinds := []string{pipeline.OpInsert, pipeline.OpRetract, pipeline.OpUpdate}
	for _, r := range in {
		r.Fields[pipeline.OpField] = kinds[r.Fields["n"].(int)%3]
	}
	return out.Emit(in)
}
func (o *opsOp) Close() error { return nil }

func testEnv() *pipeline.Env {
	env := pipeline.NewEnv()
	env.RegisterSource(pipeline.SourcePlugin{Type: "seq", New: func() pipeline.SourceConfig { return &pipelinetest.SeqSourceConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "collect", New: func() pipeline.SinkConfig { return &collectConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "keyed", New: func() pipeline.StepConfig { return &keyStepConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "pass", New: func() pipeline.StepConfig { return &passConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "where", New: func() pipeline.StepConfig { return &whereConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "wmlog", New: func() pipeline.StepConfig { return &wmLogConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "ops", New: func() pipeline.StepConfig { return &opsConfig{} }})
	env.RegisterStep(pipeline.StepPlugin{Kind: "count_by", New: func() pipeline.StepConfig { return &countConfig{} }})
	env.RegisterSink(pipeline.SinkPlugin{Type: "txn", New: func() pipeline.SinkConfig { return &txnConfig{} }})
	return env
}

// load loads a pipeline text and gives every collect sink its collector.
func load(t *testing.T, text string) (*pipeline.Plan, map[string]*collector) {
	t.Helper()
	spec, err := pipeline.Load(testEnv(), "test.yaml", []byte(text))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	cols := map[string]*collector{}
	for _, s := range spec.Sinks {
		if cc, ok := s.Config.(*collectConfig); ok {
			cc.c = newCollector()
			cols[s.ID] = cc.c
		}
	}
	return plan, cols
}

func run(t *testing.T, plan *pipeline.Plan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := pipeline.NewRunner(plan.Spec, pipeline.RunnerOptions{})
	require.NoError(t, err)
	require.NoError(t, r.Run(ctx))
}
