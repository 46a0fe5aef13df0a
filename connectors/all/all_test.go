package all

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

func TestEverythingIsRegistered(t *testing.T) {
	require.Subset(t, pipeline.Default.SourceTypes(), []string{"file", "generator", "socket", "stdin"})
	require.Subset(t, pipeline.Default.SinkTypes(), []string{"blackhole", "file", "stdout"})
	require.NotNil(t, pipeline.Default.WriteAhead(), "the write-ahead sink wrapper is registered")
}

// TestPositionsDescribed: every source type that checkpoints a position
// (it restores from one: exactly-once) decodes it for eddy state inspect.
func TestPositionsDescribed(t *testing.T) {
	var described []string
	for _, typ := range pipeline.Default.SourceTypes() {
		p, _ := pipeline.Default.Source(typ)
		cfg := p.New()
		if g, ok := cfg.(pipeline.GuaranteeOf); !ok || g.Guarantee() != pipeline.ExactlyOnce {
			continue
		}
		_, ok := cfg.(pipeline.PositionDescriber)
		require.True(t, ok, "source type %q replays from a position but does not describe it (pipeline.PositionDescriber)", typ)
		described = append(described, typ)
	}
	require.Subset(t, described, []string{"file", "generator", "kafka"})
}

// TestLoadPipeline loads a pipeline file that uses every connector.
func TestLoadPipeline(t *testing.T) {
	yaml := `version: 1
name: all-connectors
parallelism: 2
sources:
  - id: gen
    type: generator
    count: 100
    fields:
      id: i
      temp: rand_normal(20, 5)
  - id: files
    type: file
    path: data/*.jsonl
  - id: in
    type: stdin
    parallelism: 1
  - id: sock
    type: socket
    address: localhost:9000
    parallelism: 1
sinks:
  - id: out
    from: gen
    type: file
    path: out/
  - id: print
    from: in
    type: stdout
    parallelism: 1
  - id: drop
    from: [files, sock]
    type: blackhole
`
	spec, err := pipeline.Load(pipeline.Default, "all.yaml", []byte(yaml))
	require.NoError(t, err)
	require.Len(t, spec.Sources, 4)
	require.Len(t, spec.Sinks, 3)
}
