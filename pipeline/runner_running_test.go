package pipeline_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// attemptLog records the OnStart and OnRunning calls of a run, in order.
type attemptLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *attemptLog) add(what string, attempt int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, what+" "+string(rune('0'+attempt)))
}

func (l *attemptLog) options() pipeline.RunnerOptions {
	return pipeline.RunnerOptions{
		OnStart:   func(a int) { l.add("start", a) },
		OnRunning: func(a int) { l.add("running", a) },
	}
}

// TestRunnerOnRunning: OnRunning follows OnStart of each attempt whose job
// opened, before the next attempt starts and before Run returns.
func TestRunnerOnRunning(t *testing.T) {
	var log attemptLog
	r, _ := newRunner(t, t.TempDir(), "restart:\n  strategy: fixed_delay\n  attempts: 2\n  delay: 1ms", "count: 300", 150, log.options())
	require.ErrorIs(t, r.Run(context.Background()), pipeline.ErrRecordFailed)
	require.Equal(t, []string{"start 1", "running 1", "start 2", "running 2", "start 3", "running 3"}, log.calls)
}

// openFailConfig is a step whose operator fails to open.
type openFailConfig struct {
	Fail bool `yaml:"open_fail"`
}

func (c *openFailConfig) Validate() error                         { return nil }
func (c *openFailConfig) NewOperator() (pipeline.Operator, error) { return &openFailOp{}, nil }

type openFailOp struct{ passOp }

func (o *openFailOp) Open(context.Context, *pipeline.OperatorContext) error {
	return errors.New("cannot open")
}

// TestRunnerOnRunningNotWhenOpenFails: a job whose task fails to open
// started (OnStart) but never ran: no OnRunning.
func TestRunnerOnRunningNotWhenOpenFails(t *testing.T) {
	env := testEnv()
	env.RegisterStep(pipeline.StepPlugin{Kind: "open_fail", New: func() pipeline.StepConfig { return &openFailConfig{} }})
	spec, err := pipeline.Load(env, "open_fail.yaml", []byte(`version: 1
name: open_fail
sources:
  - { id: nums, type: seq, forever: true, pace: true }
steps:
  - { id: bad, open_fail: true }
sinks:
  - { id: out, type: collect }
`))
	require.NoError(t, err)
	spec.Sinks[0].Config.(*collectConfig).c = newCollector()
	var log attemptLog
	opts := log.options()
	opts.Logger = slog.New(slog.DiscardHandler)
	r, err := pipeline.NewRunner(spec, opts)
	require.NoError(t, err)
	require.ErrorContains(t, r.Run(context.Background()), "cannot open")
	require.Equal(t, pipeline.RunFailed, r.State())
	require.Equal(t, []string{"start 1"}, log.calls)
}
