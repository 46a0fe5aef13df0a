package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// keyFailedSource reads records {n} for n below count in one batch, and
// hands the records of n in failed as key failures (ReadBatch.KeyFailed)
// with the error "key_by: failed upstream", as group mode's exchange
// reader hands the records whose key failed in the sending process.
type keyFailedSource struct {
	count  int
	failed []int
	done   bool
}

type keyFailedSourceConfig struct {
	Count  int   `yaml:"count"`
	Failed []int `yaml:"failed"`
}

func (c *keyFailedSourceConfig) Validate() error { return nil }
func (c *keyFailedSourceConfig) NewSource() (pipeline.Source, error) {
	return &keyFailedSource{count: c.Count, failed: c.Failed}, nil
}

func (s *keyFailedSource) Open(context.Context, *pipeline.SourceContext) error { return nil }
func (s *keyFailedSource) Close(context.Context) error                         { return nil }
func (s *keyFailedSource) Read(_ context.Context, b *pipeline.ReadBatch) error {
	if s.done {
		return io.EOF
	}
	s.done = true
	for n := range s.count {
		b.Records = append(b.Records, pipeline.Record{Fields: map[string]any{"n": n}, Time: int64(n)})
	}
	for _, n := range s.failed {
		b.KeyFailed = append(b.KeyFailed, pipeline.KeyFailure{Record: pipeline.Record{Fields: map[string]any{"n": n}, Time: int64(n)},
			Err: errors.New("key_by: failed upstream")})
	}
	return nil
}

// TestKeyFailedFromTheSource: records a source hands as key failures
// follow the on_error policy of the keyed step it feeds, with the error
// they came with (their key, which would not fail here, is not computed
// again): dead letters on the step's errors stream, or skipped, or the
// run fails; counted as the step's. A source that feeds no keyed step
// cannot hand any.
func TestKeyFailedFromTheSource(t *testing.T) {
	const text = `
version: 1
name: keyfailed
sources:
  - id: in
    type: keyfailed
    count: 5
    failed: [10, 11]
steps:
  - id: k
    keyed: n
    on_error: %s
    parallelism: 2
sinks:
  - id: out
    type: collect
%s`
	load := func(t *testing.T, text string) (*pipeline.Plan, map[string]*collector) {
		t.Helper()
		env := testEnv()
		env.RegisterSource(pipeline.SourcePlugin{Type: "keyfailed", New: func() pipeline.SourceConfig { return &keyFailedSourceConfig{} }})
		spec, err := pipeline.Load(env, "test.yaml", []byte(text))
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
	runWith := func(t *testing.T, plan *pipeline.Plan) (*pipeline.Metrics, error) {
		t.Helper()
		m := pipeline.NewMetrics()
		r, err := pipeline.NewRunner(plan.Spec, pipeline.RunnerOptions{Metrics: m})
		require.NoError(t, err)
		return m, r.Run(context.Background())
	}

	t.Run("dead_letter", func(t *testing.T) {
		plan, cols := load(t, fmt.Sprintf(text, "dead_letter", "  - id: dead\n    type: collect\n    from: k.errors\n"))
		m, err := runWith(t, plan)
		require.NoError(t, err)
		require.Len(t, cols["out"].all(), 5, "the records go to the keyed step")
		require.ElementsMatch(t, []map[string]any{
			{"record": map[string]any{"n": 10}, "error": "key_by: failed upstream", "step": "k"},
			{"record": map[string]any{"n": 11}, "error": "key_by: failed upstream", "step": "k"},
		}, cols["dead"].all())
		require.Equal(t, map[string]pipeline.ErrorCounts{"k": {DeadLettered: 2}}, m.RecordErrorCounts())
	})
	t.Run("skip", func(t *testing.T) {
		plan, cols := load(t, fmt.Sprintf(text, "skip", ""))
		m, err := runWith(t, plan)
		require.NoError(t, err)
		require.Len(t, cols["out"].all(), 5)
		require.Equal(t, map[string]pipeline.ErrorCounts{"k": {Skipped: 2}}, m.RecordErrorCounts())
	})
	t.Run("fail", func(t *testing.T) {
		plan, _ := load(t, fmt.Sprintf(text, "fail", ""))
		m, err := runWith(t, plan)
		require.ErrorIs(t, err, pipeline.ErrRecordFailed)
		require.ErrorContains(t, err, `record failed in "k": key_by: failed upstream`)
		require.Equal(t, map[string]pipeline.ErrorCounts{"k": {Failed: 1}}, m.RecordErrorCounts())
	})
	t.Run("no keyed step", func(t *testing.T) {
		plan, _ := load(t, "version: 1\nname: nokey\nsources:\n  - id: in\n    type: keyfailed\n    count: 1\n    failed: [3]\nsinks:\n  - id: out\n    type: collect\n")
		_, err := runWith(t, plan)
		require.ErrorContains(t, err, `source "in" read a record whose key failed, but feeds no keyed step`)
	})
}
