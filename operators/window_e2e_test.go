package operators_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	_ "github.com/eddy-stream/eddy/connectors/all" // file and generator sources
	"github.com/eddy-stream/eddy/internal/testkit"
	_ "github.com/eddy-stream/eddy/operators"
	"github.com/eddy-stream/eddy/pipeline"
)

// Window steps through the real runtime: pipeline.Load with the registered
// components, Compile and Run, with keyed windows at parallelism 2 and a
// watermark after every record (watermark.interval: 0).

// collected holds what the test sink "window_test_collect" received, by its
// `name` key.
var collected = struct {
	sync.Mutex
	m map[string][]pipeline.Record
}{m: map[string][]pipeline.Record{}}

type collectConfig struct {
	Name string `yaml:"name"`
}

func (c *collectConfig) Validate() error                                 { return nil }
func (c *collectConfig) NewSink() (pipeline.Sink, error)                 { return &collectSink{name: c.Name}, nil }
func (s *collectSink) Open(context.Context, *pipeline.SinkContext) error { return nil }
func (s *collectSink) Flush(context.Context) error                       { return nil }
func (s *collectSink) Close(context.Context) error                       { return nil }

type collectSink struct{ name string }

func (s *collectSink) Write(_ context.Context, b []pipeline.Record) error {
	collected.Lock()
	defer collected.Unlock()
	for _, r := range b {
		collected.m[s.name] = append(collected.m[s.name], r.Clone())
	}
	return nil
}

func init() {
	pipeline.Default.RegisterSink(pipeline.SinkPlugin{Type: "window_test_collect", Summary: "test sink",
		New: func() pipeline.SinkConfig { return &collectConfig{} }})
}

// results returns what sink name got, as sorted JSON lines with the
// record's time appended ("@t").
func results(name string) []string {
	collected.Lock()
	defer collected.Unlock()
	var out []string
	for _, r := range collected.m[name] {
		b, _ := json.Marshal(r.Fields)
		out = append(out, fmt.Sprintf("%s@%d", b, r.Time))
	}
	slices.Sort(out)
	return out
}

func reset(names ...string) {
	collected.Lock()
	defer collected.Unlock()
	for _, n := range names {
		delete(collected.m, n)
	}
}

func writeLines(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return strconv.Quote(p)
}

func startPipeline(t *testing.T, yaml string) *pipeline.Job {
	t.Helper()
	spec, err := pipeline.Load(pipeline.Default, "windows.yaml", []byte(yaml))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{})
	require.NoError(t, err)
	return job
}

func runPipeline(t *testing.T, yaml string) {
	t.Helper()
	job := startPipeline(t, yaml)
	t.Cleanup(job.Cancel)
	testkit.WaitFor(t, job.Done(), "the pipeline to end")
	require.NoError(t, job.Wait())
}

// Out-of-order records within the bound, one too late for its window (to
// late_output), a late update within the lateness, at parallelism 2.
func TestWindowRuntimeTumbling(t *testing.T) {
	reset("e2e_out", "e2e_late")
	dir := t.TempDir()
	in := writeLines(t, dir, "in.jsonl",
		`{"id":"a","ts":1000,"temp":10}`,
		`{"id":"b","ts":1500,"temp":30}`,
		`{"id":"a","ts":500,"temp":20}`, // out of order, within 1s
		`{"id":"c","ts":9000,"temp":5}`,
		`{"id":"a","ts":11000,"temp":1}`, // W = 9999: [0, 10s) fires
		`{"id":"a","ts":9500,"temp":3}`,  // fired, within lateness: late update
		`{"id":"b","ts":13000,"temp":2}`, // W = 11999: [0, 10s) is late
		`{"id":"c","ts":2000,"temp":7}`,  // late: to late_output
		`{"id":"c","ts":25000,"temp":4}`,
	)
	runPipeline(t, `version: 1
name: windows-e2e
parallelism: 2
sources:
  - id: readings
    type: file
    parallelism: 1
    path: `+in+`
    event_time: ts
    watermark: {max_out_of_orderness: 1s, interval: 0}
steps:
  - id: per_sensor
    key_by: id
    window: {type: tumbling, size: 10s}
    allowed_lateness: 2s
    late_output: late_readings
    aggregate:
      n: count()
      avg_temp: avg(temp)
sinks:
  - id: out
    type: window_test_collect
    name: e2e_out
  - id: late
    from: late_readings
    type: window_test_collect
    name: e2e_late
`)
	require.Equal(t, []string{
		`{"_firing":"late_update","avg_temp":11,"id":"a","n":3,"window_end":10000,"window_start":0}@9999`,
		`{"_firing":"on_time","avg_temp":1,"id":"a","n":1,"window_end":20000,"window_start":10000}@19999`,
		`{"_firing":"on_time","avg_temp":15,"id":"a","n":2,"window_end":10000,"window_start":0}@9999`,
		`{"_firing":"on_time","avg_temp":2,"id":"b","n":1,"window_end":20000,"window_start":10000}@19999`,
		`{"_firing":"on_time","avg_temp":30,"id":"b","n":1,"window_end":10000,"window_start":0}@9999`,
		`{"_firing":"on_time","avg_temp":4,"id":"c","n":1,"window_end":30000,"window_start":20000}@29999`,
		`{"_firing":"on_time","avg_temp":5,"id":"c","n":1,"window_end":10000,"window_start":0}@9999`,
	}, results("e2e_out"))
	require.Equal(t, []string{`{"id":"c","temp":7,"ts":2000,"window_end":10000,"window_start":0}@2000`}, results("e2e_late"))
}

// A step reading two sources follows the minimum of their watermarks: the
// records of the lagging source (a slow generator) are not late although
// the other source (a file read at once) is far ahead in event time.
func TestWindowRuntimeMinWatermark(t *testing.T) {
	reset("e2e_min")
	dir := t.TempDir()
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf(`{"id":"k%d","ts":%d}`, i%2, 1000+i*1000))
	}
	fast := writeLines(t, dir, "fast.jsonl", lines...)
	runPipeline(t, `version: 1
name: windows-min-watermark
parallelism: 2
sources:
  - id: fast
    type: file
    parallelism: 1
    path: `+fast+`
    event_time: ts
    watermark: {interval: 0}
  - id: slow
    type: generator
    parallelism: 1
    count: 10
    rate: 100
    fields:
      id: '"k" + string(i % 2)'
      ts: 1000 + i * 1000
    event_time: ts
    watermark: {interval: 0}
steps:
  - id: per_key
    from: [fast, slow]
    key_by: id
    window: {type: tumbling, size: 10s}
    aggregate: {n: count()}
sinks:
  - id: out
    type: window_test_collect
    name: e2e_min
`)
	// fast: ts 1s..30s, k0 at odd seconds, k1 at even ones; slow: ts
	// 1s..10s likewise.
	require.Equal(t, []string{
		`{"_firing":"on_time","id":"k0","n":10,"window_end":10000,"window_start":0}@9999`,
		`{"_firing":"on_time","id":"k0","n":5,"window_end":20000,"window_start":10000}@19999`,
		`{"_firing":"on_time","id":"k0","n":5,"window_end":30000,"window_start":20000}@29999`,
		`{"_firing":"on_time","id":"k1","n":1,"window_end":40000,"window_start":30000}@39999`,
		`{"_firing":"on_time","id":"k1","n":5,"window_end":30000,"window_start":20000}@29999`,
		`{"_firing":"on_time","id":"k1","n":6,"window_end":20000,"window_start":10000}@19999`,
		`{"_firing":"on_time","id":"k1","n":8,"window_end":10000,"window_start":0}@9999`,
	}, results("e2e_min"))
}

// An idle input does not hold the watermark back: with idle_timeout, a
// followed empty file stops counting and the windows of the other source
// fire while the pipeline still runs. The generator runs for 0.8s, well
// after the file is idle (50ms). The generator's rate, the file's polling
// and the watermark's timers run on a synctest bubble's fake clock.
func TestWindowRuntimeIdleSource(t *testing.T) {
	synctest.Test(t, testWindowRuntimeIdleSource)
}

func testWindowRuntimeIdleSource(t *testing.T) {
	reset("e2e_idle")
	dir := t.TempDir()
	empty := writeLines(t, dir, "empty.jsonl")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.jsonl"), nil, 0o644))
	job := startPipeline(t, `version: 1
name: windows-idle
parallelism: 2
sources:
  - id: events
    type: generator
    parallelism: 1
    count: 40
    rate: 50
    fields:
      id: '"k" + string(i % 2)'
      ts: i * 500
    event_time: ts
    watermark: {interval: 0}
  - id: quiet
    type: file
    parallelism: 1
    path: `+empty+`
    follow: true
    poll_interval: 10ms
    event_time: ts
    watermark: {interval: 10ms, idle_timeout: 50ms}
steps:
  - id: per_key
    from: [events, quiet]
    key_by: id
    window: {type: tumbling, size: 5s}
    aggregate: {n: count()}
sinks:
  - id: out
    type: window_test_collect
    name: e2e_idle
`)
	t.Cleanup(func() {
		job.Cancel()
		_ = job.Wait()
	})
	// ts 0..19.5s every 0.5s: 4 windows of 10 records, 5 per key.
	want := []string{}
	for w := int64(0); w < 20000; w += 5000 {
		for _, k := range []string{"k0", "k1"} {
			want = append(want, fmt.Sprintf(`{"_firing":"on_time","id":"%s","n":5,"window_end":%d,"window_start":%d}@%d`, k, w+5000, w, w+4999))
		}
	}
	slices.Sort(want)
	// The generator ends after 0.8s (40 records at 50/s); the job then
	// runs on, its file source followed.
	time.Sleep(time.Second)
	synctest.Wait()
	require.Equal(t, want, results("e2e_idle"), "every window fired while the pipeline runs")
	job.Stop()
	testkit.WaitFor(t, job.Done(), "the pipeline to stop")
	require.NoError(t, job.Wait())
	require.Equal(t, want, results("e2e_idle"))
}

// A processing-time window fires on the task's processing-time timer at
// its end (window_end - 1), while the pipeline runs: the generator's rate
// and the timer run on a synctest bubble's fake clock, which starts at a
// multiple of 10s.
func TestWindowRuntimeProcessingTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset("e2e_pt")
		start := time.Now().UnixMilli()
		require.Zero(t, start%10_000)
		job := startPipeline(t, `version: 1
name: windows-pt
sources:
  - id: events
    type: generator
    rate: 1
    fields:
      id: '"k"'
steps:
  - id: per_key
    key_by: id
    window: {type: tumbling, size: 10s}
    aggregate: {n: count()}
sinks:
  - id: out
    type: window_test_collect
    name: e2e_pt
`)
		t.Cleanup(func() {
			job.Cancel()
			_ = job.Wait()
		})
		time.Sleep(10*time.Second - 2*time.Millisecond)
		synctest.Wait()
		require.Empty(t, results("e2e_pt"), "2ms before the window's end")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.Equal(t, []string{fmt.Sprintf(`{"_firing":"on_time","id":"k","n":10,"window_end":%d,"window_start":%d}@%d`,
			start+10_000, start, start+9_999)}, results("e2e_pt"), "at window_end - 1")
	})
}
