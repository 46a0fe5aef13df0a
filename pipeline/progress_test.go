package pipeline_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/pipeline/pipelinetest"
)

// progressSourceConfig makes seq sources that report a fixed progress:
// subtask k read k+1 of 10 (unknown total when total is false).
type progressSourceConfig struct {
	pipelinetest.SeqSourceConfig `yaml:",inline"`
	Total                        bool `yaml:"total"`
}

func (c *progressSourceConfig) NewSource() (pipeline.Source, error) {
	inner, err := c.SeqSourceConfig.NewSource()
	return &progressSource{Source: inner, total: c.Total}, err
}

type progressSource struct {
	pipeline.Source
	total bool
	sub   int64
}

func (s *progressSource) Open(ctx context.Context, sc *pipeline.SourceContext) error {
	s.sub = int64(sc.Subtask)
	return s.Source.Open(ctx, sc)
}

func (s *progressSource) Progress() (done, total int64) {
	if !s.total {
		return s.sub + 1, 0
	}
	return s.sub + 1, 10
}

// TestRunnerProgress: a job's progress per source sums its subtasks'; a
// source whose subtasks do not all know their total, or that does not
// report, has none.
func TestRunnerProgress(t *testing.T) {
	env := testEnv()
	env.RegisterSource(pipeline.SourcePlugin{Type: "progress", New: func() pipeline.SourceConfig { return &progressSourceConfig{} }})
	spec, err := pipeline.Load(env, "progress.yaml", []byte(`version: 1
name: progress
sources:
  - { id: known, type: progress, parallelism: 3, total: true, forever: true, pace: true }
  - { id: unknown, type: progress, parallelism: 2, forever: true, pace: true }
  - { id: silent, type: seq, forever: true, pace: true }
sinks:
  - { id: out, from: [known, unknown, silent], type: collect }
`))
	require.NoError(t, err)
	spec.Sinks[0].Config.(*collectConfig).c = newCollector()
	var r *pipeline.Runner
	var got []pipeline.SourceProgress
	r, err = pipeline.NewRunner(spec, pipeline.RunnerOptions{Logger: slog.New(slog.DiscardHandler), OnRunning: func(int) {
		got = r.Progress()
		require.NoError(t, r.Stop())
	}})
	require.NoError(t, err)
	require.Nil(t, r.Progress(), "no job yet")
	require.NoError(t, r.Run(context.Background()))
	require.Equal(t, []pipeline.SourceProgress{
		{ID: "known", Done: 1 + 2 + 3, Total: 30},
		{ID: "unknown", Done: 1 + 2, Total: 0},
		{ID: "silent", Done: 0, Total: 0},
	}, got)
}
