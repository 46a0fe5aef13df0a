package operators

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/internal/testkit"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// Every expression step under every on_error policy: a batch of three records
// whose middle one fails.
func TestOnError(t *testing.T) {
	kinds := []struct {
		step    string
		good    fields // passes, emitted as want
		bad     fields // fails
		want    fields
		errText string
	}{
		{"filter: x > 0", fields{"x": 1}, fields{"x": "a"}, fields{"x": 1},
			`filter expression "x > 0": invalid operation: string > int (1:3)`},
		{"set: {y: x + 1}", fields{"x": 1}, fields{"x": "a"}, fields{"x": 1, "y": 2},
			`set field "y": expression "x + 1": invalid operation: string + int (1:3)`},
		{"map: {y: x + 1}", fields{"x": 1}, fields{"x": "a"}, fields{"y": 2},
			`map field "y": expression "x + 1": invalid operation: string + int (1:3)`},
		{"flat_map: x", fields{"x": []any{1}}, fields{"x": "a"}, fields{"value": 1},
			`expression returned the wrong type: flat_map expression "x" returned string, not a list`},
		// A NaN or an infinite float is an error, not a value (ErrNotFinite),
		// also inside the maps and lists an expression returns.
		// The dead letter holds the record as the step received it: c, set
		// before q failed, is taken back.
		{"set: {c: 1, q: a / b}", fields{"a": 1, "b": 2}, fields{"a": 1, "b": 0}, fields{"a": 1, "b": 2, "c": 1, "q": 0.5},
			`set field "q": expression "a / b": the result is +Inf, not a finite number (a division by zero?)`},
		{`map: {m: '{"x": [1, a / b]}'}`, fields{"a": 1, "b": 2}, fields{"a": 0, "b": 0}, fields{"m": fields{"x": []any{1, 0.5}}},
			`map field "m": expression "{\"x\": [1, a / b]}": the result holds NaN at "x.1", not a finite number (a division by zero?)`},
		{"flat_map: '[a / b]'", fields{"a": 1, "b": 2}, fields{"a": -1, "b": 0}, fields{"value": 0.5},
			`flat_map expression "[a / b]": the result holds -Inf at "0", not a finite number (a division by zero?)`},
	}
	policies := []pipeline.OnError{pipeline.OnErrorFail, pipeline.OnErrorSkip, pipeline.OnErrorDeadLetter}
	for _, k := range kinds {
		for _, policy := range policies {
			t.Run(fmt.Sprintf("%s/%s", k.step, policy), func(t *testing.T) {
				h := newHarness(t, stepYAML(k.step+"\n    on_error: "+policy.String()))
				require.Equal(t, policy, h.step.OnError)
				meta := &expr.Meta{Offset: 3}
				bad := pipeline.Record{Fields: maps.Clone(k.bad), Time: 42, Meta: meta}
				out, err := h.process(rec(maps.Clone(k.good)), bad, rec(maps.Clone(k.good)))
				require.Equal(t, float64(1), h.errorCount())
				switch policy {
				case pipeline.OnErrorFail:
					require.ErrorIs(t, err, pipeline.ErrRecordFailed)
					require.EqualError(t, err, `record failed in "s": `+k.errText)
					require.Equal(t, []pipeline.Record{rec(k.want)}, out.records,
						"the records before the failing one are emitted, then the step fails")
					require.Empty(t, h.dead.records)
				case pipeline.OnErrorSkip:
					require.NoError(t, err)
					require.Equal(t, []pipeline.Record{rec(k.want), rec(k.want)}, out.records)
					require.Empty(t, h.dead.records)
				case pipeline.OnErrorDeadLetter:
					require.NoError(t, err)
					require.Equal(t, []pipeline.Record{rec(k.want), rec(k.want)}, out.records)
					require.Equal(t, []pipeline.Record{
						pipeline.DeadLetter("s", pipeline.Record{Fields: k.bad, Time: 42, Meta: meta}, errors.New(k.errText)),
					}, h.dead.records)
				}
			})
		}
	}
}

// A dead-letter stream that fails fails the task.
func TestDeadLetterEmitFails(t *testing.T) {
	spec, err := loadSteps(stepYAML("filter: x > 0\n    on_error: dead_letter"))
	require.NoError(t, err)
	op, err := spec.Steps[0].Config.NewOperator()
	require.NoError(t, err)
	info := pipeline.SubtaskInfo{ID: "s", Parallelism: 1, MaxParallelism: 128, Logger: slog.Default(), Metrics: pipeline.NewMetrics()}
	boom := errors.New("boom")
	dead := pipeline.EmitterFunc(func([]pipeline.Record) error { return boom })
	require.NoError(t, op.Open(context.Background(), &pipeline.OperatorContext{
		SubtaskInfo: info, Errors: pipeline.NewErrorHandler(info, pipeline.OnErrorDeadLetter, dead),
	}))
	err = op.Process([]pipeline.Record{rec(fields{"x": "a"})}, &collector{})
	require.ErrorIs(t, err, boom)
}

// Without an error handler in the context, a failed record fails the task.
func TestNoErrorHandlerFails(t *testing.T) {
	spec, err := loadSteps(stepYAML("set: {y: x + 1}"))
	require.NoError(t, err)
	op, err := spec.Steps[0].Config.NewOperator()
	require.NoError(t, err)
	require.NoError(t, op.Open(context.Background(), &pipeline.OperatorContext{SubtaskInfo: pipeline.SubtaskInfo{ID: "s"}}))
	err = op.Process([]pipeline.Record{rec(fields{"x": "a"})}, &collector{})
	require.ErrorIs(t, err, pipeline.ErrRecordFailed)
}

// Operators of one step on different subtasks share no mutable state (each
// has its own VM and scratch): run them concurrently under -race.
func TestSubtasksShareNothing(t *testing.T) {
	for _, step := range []string{"filter: x % 2 == 0", "set: {y: x * 2, z: y + 1}", "map: {y: x * 2}", "flat_map: '[x, x + 1]'"} {
		spec, err := loadSteps(stepYAML(step))
		require.NoError(t, err)
		cfg := spec.Steps[0].Config
		errs := make(chan error, 4)
		for sub := range 4 {
			go func() {
				op, err := cfg.NewOperator()
				if err == nil {
					info := pipeline.SubtaskInfo{ID: "s", Subtask: sub, Parallelism: 4, MaxParallelism: 128, Metrics: pipeline.NewMetrics()}
					err = op.Open(context.Background(), &pipeline.OperatorContext{SubtaskInfo: info, Errors: pipeline.NewErrorHandler(info, pipeline.OnErrorFail, nil)})
				}
				for b := 0; err == nil && b < 50; b++ {
					batch := make([]pipeline.Record, 64)
					for i := range batch {
						batch[i] = rec(fields{"x": i})
					}
					err = op.Process(batch, &collector{})
				}
				errs <- err
			}()
		}
		for range 4 {
			require.NoError(t, testkit.WaitFor(t, errs, "a goroutine of "+step), step)
		}
	}
}
