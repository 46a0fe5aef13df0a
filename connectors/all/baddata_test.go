package all

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	_ "github.com/eddy-stream/eddy/operators"
	"github.com/eddy-stream/eddy/pipeline"
)

// JSON integers are int64, so that integer operators work on them as on
// generated numbers: configs/odd_even.yaml's `n % 2` over a JSON file.
func TestRunModuloOverJSONIntegers(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	var sb strings.Builder
	for n := 1; n <= 6; n++ {
		fmt.Fprintf(&sb, "{\"n\":%d}\n", n)
	}
	require.NoError(t, os.WriteFile(in, []byte(sb.String()), 0o644))
	odd, even := filepath.Join(dir, "odd.jsonl"), filepath.Join(dir, "even.jsonl")
	yaml := fmt.Sprintf(`version: 1
name: odd-even-json
parallelism: 1
sources:
  - id: numbers
    type: file
    path: %s
    on_error: fail
steps:
  - id: tagged
    from: numbers
    on_error: fail
    set:
      parity: 'n %% 2 == 1 ? "odd" : "even"'
  - id: sums
    from: tagged
    key_by: parity
    aggregate:
      sum: sum(n)
  - id: odd
    from: sums
    filter: parity == "odd"
  - id: even
    from: sums
    filter: parity == "even"
sinks:
  - id: odd_out
    from: odd
    type: file
    path: %s
    changelog: retract
  - id: even_out
    from: even
    type: file
    path: %s
    changelog: upsert
`, strconv.Quote(in), strconv.Quote(odd), strconv.Quote(even))
	require.NoError(t, run(t, pipeline.Default, yaml, nil, nil))
	require.Equal(t, `{"_op":"+I","parity":"odd","sum":1}
{"_op":"-U","parity":"odd","sum":1}
{"_op":"+U","parity":"odd","sum":4}
{"_op":"-U","parity":"odd","sum":4}
{"_op":"+U","parity":"odd","sum":9}
`, readFile(t, odd))
	require.Equal(t, `{"_op":"+I","parity":"even","sum":2}
{"_op":"+U","parity":"even","sum":6}
{"_op":"+U","parity":"even","sum":12}
`, readFile(t, even))
}

// A record a sink cannot encode fails the run only after the records
// before it are out, counted as written; the error names the sink, the
// record's position and the field.
func TestRunUnencodableRecordKeepsEarlierOnes(t *testing.T) {
	recs := []map[string]any{{"i": 1}, {"i": 2}, {"i": 3, "x": map[string]any{"y": math.Inf(1)}}, {"i": 4}}
	env := pipeline.NewEnv()
	env.RegisterSource(pipeline.SourcePlugin{Type: "records", New: func() pipeline.SourceConfig { return &recordsConfig{recs: recs} }})
	for _, typ := range []string{"file", "stdout"} {
		p, ok := pipeline.Default.Sink(typ)
		require.True(t, ok)
		env.RegisterSink(p)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	tests := []struct {
		name, sink string
		output     func() string
	}{
		{"file", "type: file\n    path: " + strconv.Quote(out), func() string { return readFile(t, out) }},
		{"stdout", "type: stdout", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout strings.Builder
			metrics := pipeline.NewMetrics()
			err := run(t, env, `version: 1
name: unencodable
sources:
  - id: in
    type: records
sinks:
  - id: out
    from: in
    `+tt.sink+"\n", metrics, &stdout)
			require.ErrorContains(t, err, `sink "out" cannot write its record 3, map[i:3 x:map[y:+Inf]]: `)
			require.ErrorContains(t, err, `: field "x.y": json: unsupported value: +Inf`)
			got := stdout.String()
			if tt.output != nil {
				got = tt.output()
			}
			require.Equal(t, "{\"i\":1}\n{\"i\":2}\n", got, "the records before the bad one, flushed")
			written := metrics.RecordsWritten(pipeline.SubtaskInfo{ID: "out", Subtask: 0, Parallelism: 1})
			require.Equal(t, 2.0, pipeline.CounterValue(written))
		})
	}
}

func run(t *testing.T, env *pipeline.Env, yaml string, metrics *pipeline.Metrics, stdout io.Writer) error {
	t.Helper()
	spec, err := pipeline.Load(env, "test.yaml", []byte(yaml))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job, err := pipeline.Start(ctx, plan, pipeline.JobOptions{Metrics: metrics, StateDir: t.TempDir(), Stdout: stdout})
	if err != nil {
		return err
	}
	return job.Wait()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// recordsConfig is a source of fixed records in one batch, for values no
// real source produces (an infinite float).
type recordsConfig struct{ recs []map[string]any }

func (c *recordsConfig) Validate() error { return nil }
func (c *recordsConfig) Bounded() bool   { return true }
func (c *recordsConfig) NewSource() (pipeline.Source, error) {
	return &recordsSource{recs: c.recs}, nil
}

type recordsSource struct{ recs []map[string]any }

func (s *recordsSource) Open(context.Context, *pipeline.SourceContext) error { return nil }
func (s *recordsSource) Close(context.Context) error                         { return nil }
func (s *recordsSource) Read(_ context.Context, b *pipeline.ReadBatch) error {
	for _, r := range s.recs {
		b.Records = append(b.Records, pipeline.NewRecord(r))
	}
	s.recs = nil
	return io.EOF
}
