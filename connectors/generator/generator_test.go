package generator

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

const fieldsYAML = `
fields:
  id: i
  sensor: rand_choice(["a", "b", "c"])
  temp: rand_normal(20, 5)
  level: rand_int(1, 6)
  on: rand_bool(0.5)
  name: rand_string(8)
  uuid: rand_uuid()
  u: rand_uniform(i, i + 1)
  f: rand_float()
  s: seed
`

func load(t *testing.T, body string) *Config {
	t.Helper()
	cfg, err := conntest.LoadSource(t, "generator", body)
	require.NoError(t, err)
	return cfg.(*Config)
}

// generate runs every subtask of parallelism p to the end and returns the
// records sorted by id.
func generate(t *testing.T, cfg *Config, p int) []map[string]any {
	t.Helper()
	var all []map[string]any
	for k := range p {
		src := conntest.OpenSource(t, cfg, k, p, nil)
		all = append(all, conntest.Fields(conntest.Drain(t, src, 10*time.Second))...)
	}
	slices.SortFunc(all, func(a, b map[string]any) int { return a["id"].(int) - b["id"].(int) })
	return all
}

func TestDeterministicAcrossParallelism(t *testing.T) {
	cfg := load(t, "count: 2500\nseed: 42\n"+fieldsYAML)
	one := generate(t, cfg, 1)
	three := generate(t, cfg, 3)
	require.Len(t, one, 2500)
	require.Equal(t, one, three)
	for i, r := range one {
		require.Equal(t, i, r["id"])
		require.Contains(t, []any{"a", "b", "c"}, r["sensor"])
		require.GreaterOrEqual(t, r["level"], 1)
		require.LessOrEqual(t, r["level"], 6)
		require.Len(t, r["name"], 8)
		require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, r["uuid"])
		require.GreaterOrEqual(t, r["u"], float64(i))
		require.Less(t, r["u"], float64(i+1))
		require.Equal(t, int64(42), r["s"])
	}
	// Another seed gives other values; the same seed the same ones.
	require.Equal(t, one, generate(t, cfg, 2))
	other := generate(t, load(t, "count: 2500\nseed: 43\n"+fieldsYAML), 1)
	require.NotEqual(t, one[0]["temp"], other[0]["temp"])
}

func TestSubtaskCounters(t *testing.T) {
	cfg := load(t, "count: 10\nfields:\n  i: i\n")
	src := conntest.OpenSource(t, cfg, 1, 3, nil)
	batches := conntest.Drain(t, src, 5*time.Second)
	var got []any
	for _, f := range conntest.Fields(batches) {
		got = append(got, f["i"])
	}
	require.Equal(t, []any{1, 4, 7}, got)
	require.Equal(t, EncodePosition(Position{Subtask: 1, Parallelism: 3, Next: 10}), conntest.LastPosition(batches))
	require.Equal(t, 1, batches[0].Split)
}

func TestRestoreContinuesExactly(t *testing.T) {
	cfg := load(t, "count: 2600\nseed: 7\n"+fieldsYAML)
	for _, p := range []int{1, 2} {
		for k := range p {
			full := conntest.Fields(conntest.Drain(t, conntest.OpenSource(t, cfg, k, p, nil), 10*time.Second))

			src := conntest.OpenSource(t, cfg, k, p, nil)
			first := conntest.ReadOnce(t, src, time.Second)
			require.NoError(t, first.Err)
			require.NoError(t, src.Close(context.Background()))

			restored := conntest.OpenSource(t, cfg, k, p, first.Position)
			rest := conntest.Fields(conntest.Drain(t, restored, 10*time.Second))
			require.Len(t, full, 2600/p) // 2600 splits evenly over 1 and 2 subtasks
			require.Equal(t, full, append(conntest.Fields([]conntest.Batch{first}), rest...), "p=%d k=%d", p, k)
		}
	}
}

// A version-1 position (8 bytes of the next counter) still restores at
// the parallelism it was taken with; at another it is refused.
func TestRestoreVersion1(t *testing.T) {
	cfg := load(t, "count: 20\nfields:\n  i: i\n")
	v1 := binary.BigEndian.AppendUint64(nil, 7)
	b := conntest.ReadOnce(t, conntest.OpenSource(t, cfg, 1, 3, v1), time.Second)
	require.Equal(t, []any{7, 10, 13, 16, 19}, ints(conntest.Fields([]conntest.Batch{b})))
	require.Equal(t, EncodePosition(Position{Subtask: 1, Parallelism: 3, Next: 22}), b.Position)

	// Restored at its parallelism, a version-1 position is kept in version
	// 2 at once: a checkpoint before the first read rescales.
	var upgraded [][]byte
	for k := range 3 {
		src, err := cfg.NewSource()
		require.NoError(t, err)
		old := binary.BigEndian.AppendUint64(nil, uint64(9+k))
		sc := &pipeline.SourceContext{SubtaskInfo: conntest.Info("g", k, 3), Restored: old}
		require.NoError(t, src.Open(context.Background(), sc))
		require.Equal(t, EncodePosition(Position{Subtask: k, Parallelism: 3, Next: 9 + k}), sc.Position)
		upgraded = append(upgraded, sc.Position)
	}
	src, err := cfg.NewSource()
	require.NoError(t, err)
	require.NoError(t, src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("g", 0, 2), RestoredAll: upgraded}))
	b = conntest.ReadOnce(t, src, time.Second)
	require.Equal(t, []any{10, 12, 14, 16, 18}, ints(conntest.Fields([]conntest.Batch{b})))

	src, err = cfg.NewSource()
	require.NoError(t, err)
	err = src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("g", 0, 2), RestoredAll: [][]byte{v1, v1, v1}})
	require.ErrorContains(t, err, "restore at the parallelism the checkpoint was taken with")
	err = src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("g", 0, 1), Restored: []byte{1, 2}})
	require.ErrorContains(t, err, "generator position of 2 bytes is not one")
}

func ints(fields []map[string]any) []any {
	var out []any
	for _, f := range fields {
		out = append(out, f["i"])
	}
	return out
}

func TestUnbounded(t *testing.T) {
	cfg := load(t, "fields:\n  i: i\n")
	require.False(t, cfg.Bounded())
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	total := 0
	for range 3 {
		b := conntest.ReadOnce(t, src, time.Second)
		require.NoError(t, b.Err)
		require.Equal(t, total, b.Records[0].Fields["i"])
		total += len(b.Records)
	}
	require.Equal(t, 3*maxBatch, total)
}

func TestRate(t *testing.T) {
	// 200 records/s over 2 subtasks: each subtask makes one every 10ms.
	cfg := load(t, "count: 40\nrate: 200\nfields:\n  i: i\n")
	start := time.Now()
	src := conntest.OpenSource(t, cfg, 0, 2, nil)
	batches := conntest.Drain(t, src, 10*time.Second)
	elapsed := time.Since(start)
	require.Len(t, conntest.Fields(batches), 20)
	require.GreaterOrEqual(t, elapsed, 150*time.Millisecond, "20 records at 100/s take about 190ms")
	require.Less(t, elapsed, 5*time.Second)
	require.Greater(t, len(batches), 5, "a rate-limited source returns small batches")
}

func TestRateHonoursContext(t *testing.T) {
	cfg := load(t, "rate: 0.1\nfields:\n  i: i\n") // one record every 10s
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	b := conntest.ReadOnce(t, src, time.Second)
	require.NoError(t, b.Err)
	require.Len(t, b.Records, 1)
	start := time.Now()
	b = conntest.ReadOnce(t, src, 50*time.Millisecond)
	require.ErrorIs(t, b.Err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestFieldErrorAtRuntime(t *testing.T) {
	cfg := load(t, "count: 5\nfields:\n  x: rand_int(i, 2)\n")
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	b := conntest.ReadOnce(t, src, time.Second)
	require.ErrorContains(t, b.Err, `generator source "src": record 3, field "x": rand_int(3, 2): hi must not be less than lo`)

	cfg = load(t, "count: 5\nfields:\n  x: rand_choice([])\n")
	b = conntest.ReadOnce(t, conntest.OpenSource(t, cfg, 0, 1, nil), time.Second)
	require.ErrorContains(t, b.Err, "rand_choice: the list is empty")
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr string
	}{
		{name: "ok", body: "count: 3\nrate: 10\nseed: -1\n" + fieldsYAML},
		{name: "fields required", body: "count: 3", wantErr: `missing required key "fields"`},
		{name: "undefined name", body: "fields:\n  x: temp + 1", wantErr: "t.yaml:7:10: expression \"temp + 1\": unknown name temp"},
		{name: "int parameter", body: "fields:\n  x: rand_int(1.5, 2)", wantErr: "cannot use float64 as argument (type int) to call rand_int"},
		{name: "negative count", body: "count: -1\nfields:\n  x: i", wantErr: "t.yaml:6:12: count: must be 0 (unbounded) or more, not -1"},
		{name: "negative rate", body: "rate: -1\nfields:\n  x: i", wantErr: "rate: must be 0"},
		{name: "duplicate field", body: "fields:\n  x: i\n  x: i + 1", wantErr: `field "x" is given twice`},
		{name: "unknown key", body: "cont: 3\nfields:\n  x: i", wantErr: `unknown key "cont"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := conntest.LoadSource(t, "generator", tt.body)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.True(t, errors.Is(err, pipeline.ErrInvalid))
				return
			}
			require.NoError(t, err)
			c := cfg.(*Config)
			require.True(t, c.Bounded())
			require.Equal(t, pipeline.ExactlyOnce, c.Guarantee())
			require.Equal(t, 3, c.Count)
			require.Equal(t, int64(-1), c.Seed)
		})
	}
}

func TestEOFWithLastRecords(t *testing.T) {
	cfg := load(t, "count: 3\nfields:\n  i: i\n")
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	b := conntest.ReadOnce(t, src, time.Second)
	require.ErrorIs(t, b.Err, io.EOF)
	require.Len(t, b.Records, 3)
	require.True(t, b.SplitDone)
	b = conntest.ReadOnce(t, src, time.Second)
	require.ErrorIs(t, b.Err, io.EOF)
	require.Empty(t, b.Records)
}

func BenchmarkGenerator(b *testing.B) {
	cfg, err := conntest.LoadSource(b, "generator", "fields:\n  id: i\n  temp: rand_normal(20, 5)\n  sensor: rand_choice(['a','b'])\n")
	require.NoError(b, err)
	src := conntest.OpenSource(b, cfg, 0, 1, nil)
	var batch pipeline.ReadBatch
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		batch.Records = batch.Records[:0]
		require.NoError(b, src.Read(context.Background(), &batch))
		n += len(batch.Records)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/record")
}
