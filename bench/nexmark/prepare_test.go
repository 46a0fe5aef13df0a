package nexmark

import (
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/configs"
	"github.com/eddy-stream/eddy/pipeline"
)

// scratchQuery is a query file as configs/nexmark's are (a source with id
// nexmark, a sink with id out): q0, pass-through of the bids, with
// everything Prepare replaces (count, checkpoint block, a file sink).
const scratchQuery = `
version: 1
name: scratch-q0
checkpoint:
  interval: 1h
sources:
  - id: nexmark
    type: nexmark
    count: 5
    event_time: date_time
    watermark:
      max_out_of_orderness: 4s
steps:
  - id: bids
    from: nexmark
    filter: event_type == 2
  - id: q0
    from: bids
    map:
      auction: bid.auction
      bidder: bid.bidder
      price: bid.price
      date_time: bid.date_time
      extra: bid.extra
sinks:
  - id: out
    from: q0
    type: file
    path: /nonexistent/out
    parallelism: 1
`

func TestPrepare(t *testing.T) {
	text, err := Prepare([]byte(scratchQuery), Setup{Events: 1234, Parallelism: 3, Checkpoint: 10 * time.Second})
	require.NoError(t, err)
	spec, err := pipeline.Load(pipeline.Default, "scratch.yaml", text)
	require.NoError(t, err, "%s", text)
	require.Equal(t, 3, spec.Parallelism)
	require.NotNil(t, spec.Checkpoint)
	require.Equal(t, pipeline.Duration(10*time.Second), spec.Checkpoint.Interval)
	require.Len(t, spec.Sinks, 1)
	require.Equal(t, "out", spec.Sinks[0].ID)
	require.Equal(t, "blackhole", spec.Sinks[0].Type)
	require.Equal(t, 1, spec.Sinks[0].Parallelism, "the sink keeps its parallelism")
	require.Equal(t, "q0", spec.Sinks[0].From[0])
	require.Contains(t, string(text), "count: 1234")

	// Without a checkpoint interval, the file's block is dropped.
	text, err = Prepare([]byte(scratchQuery), Setup{Events: 7})
	require.NoError(t, err)
	spec, err = pipeline.Load(pipeline.Default, "scratch.yaml", text)
	require.NoError(t, err, "%s", text)
	require.Nil(t, spec.Checkpoint)
	require.Equal(t, 1, spec.Parallelism, "the file's parallelism (none: 1) is kept")
	require.Contains(t, string(text), "count: 7")
}

func TestPrepareRateAndEmitRate(t *testing.T) {
	q := `
version: 1
name: n
sources:
  - id: nexmark
    type: nexmark
    rate: 1000
    emit_rate: 1000
sinks:
  - id: out
    from: nexmark
    type: stdout
`
	text, err := Prepare([]byte(q), Setup{Events: 10, Rate: 10000000})
	require.NoError(t, err)
	require.Contains(t, string(text), "rate: 10000000")
	require.NotContains(t, string(text), "emit_rate", "no wall-clock pacing in a benchmark")
	require.Contains(t, string(text), "type: blackhole")
	require.NotContains(t, string(text), "stdout")

	text, err = Prepare([]byte(q), Setup{Events: 10})
	require.NoError(t, err)
	require.Contains(t, string(text), "rate: 1000\n", "no --rate: the file's")
}

func TestPrepareNeedsTheConvention(t *testing.T) {
	_, err := Prepare([]byte("version: 1\nname: x\nsources:\n  - id: gen\n    type: generator\nsinks:\n  - id: out\n    type: stdout\n"), Setup{Events: 1})
	require.ErrorContains(t, err, `no source with id "nexmark"`)
	_, err = Prepare([]byte("version: 1\nname: x\nsources:\n  - id: nexmark\n    type: generator\nsinks:\n  - id: result\n    type: stdout\n"), Setup{Events: 1})
	require.ErrorContains(t, err, `no sink with id "out"`)
	_, err = Prepare([]byte("- a list"), Setup{Events: 1})
	require.Error(t, err)
}

func TestQueriesInNumericOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"q10.yaml": {}, "q2.yaml": {}, "q0.yaml": {}, "README.md": {}, "qx.yaml": {}, "q1.yml": {},
	}
	qs, err := Queries(fsys)
	require.NoError(t, err)
	require.Equal(t, []string{"q0", "q2", "q10"}, qs)
}

// Every query file built into eddy follows the convention and loads once
// prepared: the benchmark can run each of them.
func TestEveryQueryFilePrepares(t *testing.T) {
	files := configs.Nexmark()
	qs, err := Queries(files)
	require.NoError(t, err)
	require.Contains(t, qs, "q0")
	for _, q := range qs {
		text, err := fs.ReadFile(files, q+".yaml")
		require.NoError(t, err)
		text, err = Prepare(text, Setup{Events: 1234, Rate: 5000, Parallelism: 2, Checkpoint: 10 * time.Second})
		require.NoError(t, err, q)
		spec, err := pipeline.Load(pipeline.Default, q+".yaml", text)
		require.NoError(t, err, "%s:\n%s", q, text)
		require.Equal(t, 2, spec.Parallelism, q)
		require.Contains(t, string(text), "count: 1234", q)
		require.NotNil(t, spec.Checkpoint, q)
		for _, sink := range spec.Sinks {
			require.Equal(t, "blackhole", sink.Type, q)
		}
		for _, src := range spec.Sources {
			if src.ID == SourceID {
				require.Equal(t, "nexmark", src.Type, q)
			}
		}
	}
}
