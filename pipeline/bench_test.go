package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// BenchmarkRuntime measures the runtime's own cost per record: a source of
// generated records through a step to a sink, chained in one task, over a
// rebalance edge, and over a hash edge, so the three can be compared as
// ratios in one run.
func BenchmarkRuntime(b *testing.B) {
	for _, tc := range []struct{ name, step string }{
		{"chained", "pass:"},
		{"rebalance", "pass:\n    rebalance: true\n    parallelism: 2"},
		{"hash", "keyed: k\n    parallelism: 2"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			text := fmt.Sprintf(`
version: 1
name: bench
sources:
  - id: nums
    type: seq
    count: %d
    keys: 1000
steps:
  - %s
sinks:
  - id: out
    type: collect
    parallelism: 1
`, b.N, tc.step)
			spec, err := pipeline.Load(testEnv(), "bench.yaml", []byte(text))
			require.NoError(b, err)
			r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
			require.NoError(b, err)
			spec.Sinks[0].Config.(*collectConfig).c = newCollector()
			b.ReportAllocs()
			b.ResetTimer()
			require.NoError(b, r.Run(context.Background()))
		})
	}
}
