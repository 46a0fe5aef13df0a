package cmd

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/checkpoint"
	"github.com/eddy-stream/eddy/checkpoint/checkpointtest"
	"github.com/eddy-stream/eddy/pipeline"
)

// windowPipeline reads readings from a followed file (so its input never
// ends: a stopped run's final checkpoint holds the windows still open,
// where the end of a bounded input would fire and drop them all), keeps
// tumbling event-time windows with allowed lateness per sensor, and a
// continuous count per sensor, whose updates on stdout tell the test that
// every reading went through.
const windowPipeline = `version: 1
name: inspect-windows
parallelism: 2
max_parallelism: 8
checkpoint:
  interval: 1h
sources:
  - id: readings
    type: file
    parallelism: 1
    path: IN
    follow: true
    poll_interval: 10ms
    event_time: ts
    watermark:
      max_out_of_orderness: 0s
      interval: 0s
steps:
  - id: per_sensor
    from: readings
    key_by: sensor
    window: {type: tumbling, size: 10s}
    allowed_lateness: 5s
    aggregate:
      n: count()
      total: sum(v)
  - id: totals
    from: readings
    key_by: sensor
    aggregate:
      n: count()
sinks:
  - id: windows
    from: per_sensor
    type: file
    path: OUT/
  - id: updates
    from: totals
    type: stdout
`

// readings, in event-time order. After the last one the watermark is
// 23999: windows [0, 10s) fired and were dropped at 14999; [10s, 20s)
// fired and is kept until 24999 (its cleanup timer); [20s, 30s) is open,
// with its firing timer at 29999 and its cleanup timer at 34999.
const readings = `{"sensor":"a","ts":1000,"v":1}
{"sensor":"b","ts":2000,"v":2}
{"sensor":"a","ts":3000,"v":3}
{"sensor":"a","ts":12000,"v":4}
{"sensor":"b","ts":15000,"v":5}
{"sensor":"a","ts":21000,"v":6}
{"sensor":"b","ts":23000,"v":7}
{"sensor":"a","ts":24000,"v":8}
`

// windowFixture is a pipeline file, its input and a state dir holding the
// one checkpoint of a run stopped after reading every line.
type windowFixture struct {
	dir, file, input, state, out string
	spec                         *pipeline.Spec
}

func (f windowFixture) storePath() string {
	return filepath.Join(f.state, f.spec.Name, checkpoint.FileName)
}

// lineWaiter is the stdout of the run: done closes once every wanted text
// was written.
type lineWaiter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want []string
	done chan struct{}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.want == nil {
		return len(p), nil
	}
	for _, s := range w.want {
		if !strings.Contains(w.buf.String(), s) {
			return len(p), nil
		}
	}
	w.want = nil
	close(w.done)
	return len(p), nil
}

// newWindowFixture runs windowPipeline in-process, as eddy run does, until
// the continuous counts show that every reading was read, then stops it
// gracefully (SIGINT): the final checkpoint holds the open windows.
func newWindowFixture(t *testing.T) windowFixture {
	t.Helper()
	dir := t.TempDir()
	f := windowFixture{dir: dir, file: filepath.Join(dir, "windows.yaml"), input: filepath.Join(dir, "readings.jsonl"),
		state: filepath.Join(dir, "state"), out: filepath.Join(dir, "out")}
	require.NoError(t, os.WriteFile(f.input, []byte(readings), 0o644))
	yaml := strings.NewReplacer("IN", f.input, "OUT", f.out).Replace(windowPipeline)
	require.NoError(t, os.WriteFile(f.file, []byte(yaml), 0o644))
	plan, err := loadPlan(io.Discard, f.file)
	require.NoError(t, err)
	f.spec = plan.Spec

	logger := slog.New(slog.DiscardHandler)
	store, err := checkpoint.Open(filepath.Dir(f.storePath()), checkpoint.Options{Logger: logger})
	require.NoError(t, err)
	w := &lineWaiter{want: []string{`"n":5,"sensor":"a"`, `"n":3,"sensor":"b"`}, done: make(chan struct{})}
	job, err := pipeline.Start(context.Background(), plan, pipeline.JobOptions{
		Logger: logger, Metrics: pipeline.NewMetrics(), Store: store, FirstCheckpointID: 1, Stdout: w,
	})
	require.NoError(t, err)
	select {
	case <-w.done:
	case <-job.Done():
		t.Fatalf("the run ended before every reading went through: %v", job.Wait())
	}
	job.Stop()
	require.NoError(t, job.Wait())
	require.NoError(t, store.Close(context.Background()))
	return f
}

// inspectJSON runs state inspect and decodes its output.
func inspectJSON(t *testing.T, env map[string]string, args ...string) (inspectOutput, result) {
	t.Helper()
	r := execute(t, env, append([]string{"state", "inspect"}, args...)...)
	var out inspectOutput
	if r.stdout != "" {
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	}
	return out, r
}

// window is one window's accumulator as the output shows it.
type window struct {
	start, rows, maxTime float64
}

// timer is one timer as the output shows it.
type timer struct {
	domain      string
	time, start float64
}

// stepKeys returns, per decoded key, the key's entry in step id, checking
// that each key is in its key group and that group in its subtask.
func stepKeys(t *testing.T, out inspectOutput, id string, maxPar, parallelism int) map[any]inspectKey {
	t.Helper()
	keys := map[any]inspectKey{}
	for _, st := range out.Steps {
		if st.ID != id {
			continue
		}
		require.Empty(t, st.Errors)
		for _, g := range st.KeyGroups {
			require.Equal(t, pipeline.SubtaskForKeyGroup(g.KeyGroup, parallelism, maxPar), g.Subtask, "key group %d", g.KeyGroup)
			for _, k := range g.Keys {
				v := k.Key
				if n, ok := v.(float64); ok {
					v = int64(n)
				}
				enc, err := pipeline.EncodeKey(nil, v)
				require.NoError(t, err)
				require.Equal(t, pipeline.KeyGroup(string(enc), maxPar), g.KeyGroup, "key %v", k.Key)
				keys[v] = k
			}
		}
	}
	return keys
}

// windowsOf returns the per_sensor windows of a key: the window state's
// namespace (the window start) and accumulator ([row, max event time],
// row = [version, rows, ...]).
func windowsOf(t *testing.T, k inspectKey) []window {
	t.Helper()
	var out []window
	for _, v := range k.State {
		require.Equal(t, "per_sensor/window", v.Name)
		require.Equal(t, "aggregating", v.Kind)
		ns := v.Namespace.(map[string]any)
		require.Equal(t, "event-time", ns["kind"])
		box := v.Value.([]any)
		row := box[0].([]any)
		out = append(out, window{start: ns["start"].(float64), rows: row[1].(float64), maxTime: box[1].(float64)})
	}
	return out
}

func timersOf(t *testing.T, k inspectKey) []timer {
	t.Helper()
	var out []timer
	for _, tm := range k.Timers {
		require.Equal(t, "per_sensor", tm.Service)
		ns := tm.Namespace.(map[string]any)
		require.Equal(t, "event-time", ns["kind"])
		out = append(out, timer{domain: tm.Domain, time: float64(tm.Time), start: ns["start"].(float64)})
	}
	return out
}

// countOf returns the continuous count of a key: its row's rows.
func countOf(t *testing.T, k inspectKey) float64 {
	t.Helper()
	require.Len(t, k.State, 1)
	require.Equal(t, "aggregate/rows", k.State[0].Name)
	require.Nil(t, k.State[0].Namespace)
	require.Empty(t, k.Timers)
	return k.State[0].Value.([]any)[1].(float64)
}

var (
	wantWindows = map[any][]window{
		"a": {{start: 10000, rows: 1, maxTime: 12000}, {start: 20000, rows: 2, maxTime: 24000}},
		"b": {{start: 10000, rows: 1, maxTime: 15000}, {start: 20000, rows: 1, maxTime: 23000}},
	}
	// Firing of [10s, 20s) happened; its cleanup, and both timers of
	// [20s, 30s), are pending.
	wantTimers = []timer{{"event-time", 24999, 10000}, {"event-time", 29999, 20000}, {"event-time", 34999, 20000}}
	wantCounts = map[any]float64{"a": 5, "b": 3}
)

// requireWindowState checks the steps' state of the window fixture's
// checkpoint, restricted to keys.
func requireWindowState(t *testing.T, out inspectOutput, keys ...string) {
	t.Helper()
	win := stepKeys(t, out, "per_sensor", 8, 2)
	totals := stepKeys(t, out, "totals", 8, 2)
	require.Len(t, win, len(keys))
	require.Len(t, totals, len(keys))
	for _, k := range keys {
		require.Contains(t, win, k)
		require.Equal(t, wantWindows[k], windowsOf(t, win[k]), "windows of %s", k)
		require.Equal(t, wantTimers, timersOf(t, win[k]), "timers of %s", k)
		require.Equal(t, wantCounts[k], countOf(t, totals[k]), "count of %s", k)
	}
}

func TestStateInspectWindows(t *testing.T) {
	f := newWindowFixture(t)
	env := map[string]string{"EDDY_STATE_DIR": f.state}
	sp := filepath.Join(f.dir, "sp.db")
	r := execute(t, env, "checkpoints", "export", f.file, "latest", sp)
	require.Equal(t, 0, r.code, r.stderr)
	inputSize := fileSize(t, f.input)

	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, out inspectOutput)
	}{
		{
			name: "pipeline file: everything, decoded by type",
			args: []string{f.file},
			check: func(t *testing.T, out inspectOutput) {
				m := out.Checkpoint
				require.Equal(t, int64(1), m.ID)
				require.Equal(t, "inspect-windows", m.Pipeline)
				require.Equal(t, f.spec.Hash, m.FileHash)
				require.False(t, m.Savepoint)
				require.Equal(t, f.storePath(), m.File)
				require.False(t, m.Completed.Before(m.Triggered))
				require.Equal(t, map[string]int{"readings": 1, "per_sensor": 2, "totals": 2, "windows": 2}, m.Parallelism)

				require.Len(t, out.Sources, 1)
				src := out.Sources[0]
				// The watermark after the last reading (ts 24000, bound 0).
				require.NotNil(t, src.Watermark)
				require.Equal(t, int64(24000-1), *src.Watermark)
				src.Watermark = nil
				require.Equal(t, inspectSource{ID: "readings", Subtask: 0, Type: "file", Position: &decoded{Encoding: "file", Value: []any{
					// Read to the end: 8 lines, the next is line 9.
					map[string]any{"file": f.input, "offset": float64(inputSize), "line": float64(9)},
				}}}, src)

				requireWindowState(t, out, "a", "b")
				require.Equal(t, []string{"per_sensor", "totals"}, []string{out.Steps[0].ID, out.Steps[1].ID})
				require.Equal(t, "key_by", out.Steps[0].Kind)

				// Each window subtask fired windows: its pending part file
				// is the committable of checkpoint 1.
				require.Len(t, out.Sinks, 2)
				for i, s := range out.Sinks {
					require.Equal(t, "windows", s.ID)
					require.Equal(t, i, s.Subtask)
					require.Equal(t, "file", s.Type)
					require.Empty(t, s.Error)
					require.Len(t, s.Committables, 1)
					require.Equal(t, "json", s.Committables[0].Encoding)
					c := s.Committables[0].Value.(map[string]any)
					require.Equal(t, float64(1), c["checkpoint"])
					require.Equal(t, float64(i), c["subtask"])
					require.Equal(t, f.out, c["dir"])
					require.Len(t, c["files"], 1)
				}
			},
		},
		{
			name: "state dir: positions it cannot type are base64",
			args: []string{filepath.Dir(f.storePath()), "--pretty"},
			check: func(t *testing.T, out inspectOutput) {
				require.Equal(t, f.storePath(), out.Checkpoint.File)
				require.Len(t, out.Sources, 1)
				require.Empty(t, out.Sources[0].Type)
				require.Equal(t, "base64", out.Sources[0].Position.Encoding)
				raw, err := base64.StdEncoding.DecodeString(out.Sources[0].Position.Value.(string))
				require.NoError(t, err)
				require.Contains(t, string(raw), f.input)
				require.Empty(t, out.Steps[0].Kind)
				requireWindowState(t, out, "a", "b")
				require.Len(t, out.Sinks, 2)
			},
		},
		{
			name: "store file",
			args: []string{f.storePath(), "--checkpoint", "1"},
			check: func(t *testing.T, out inspectOutput) {
				require.Equal(t, int64(1), out.Checkpoint.ID)
				requireWindowState(t, out, "a", "b")
			},
		},
		{
			name: "savepoint",
			args: []string{sp},
			check: func(t *testing.T, out inspectOutput) {
				require.True(t, out.Checkpoint.Savepoint)
				require.Equal(t, sp, out.Checkpoint.File)
				require.Equal(t, int64(1), out.Checkpoint.ID)
				requireWindowState(t, out, "a", "b")
			},
		},
		{
			name: "one step",
			args: []string{f.file, "--step", "per_sensor"},
			check: func(t *testing.T, out inspectOutput) {
				require.Empty(t, out.Sources)
				require.Empty(t, out.Sinks)
				require.Len(t, out.Steps, 1)
				win := stepKeys(t, out, "per_sensor", 8, 2)
				require.Len(t, win, 2)
				require.Equal(t, wantWindows["b"], windowsOf(t, win["b"]))
				// The metadata still describes the whole checkpoint.
				require.Len(t, out.Checkpoint.Parallelism, 4)
			},
		},
		{
			name: "a source",
			args: []string{f.file, "--step", "readings"},
			check: func(t *testing.T, out inspectOutput) {
				require.Empty(t, out.Steps)
				require.Empty(t, out.Sinks)
				require.Len(t, out.Sources, 1)
				require.Equal(t, "file", out.Sources[0].Position.Encoding)
			},
		},
		{
			name: "one key",
			args: []string{f.file, "--key", "a"},
			check: func(t *testing.T, out inspectOutput) {
				require.Empty(t, out.Sources)
				require.Empty(t, out.Sinks)
				requireWindowState(t, out, "a")
				for _, st := range out.Steps {
					require.Len(t, st.KeyGroups, 1)
				}
			},
		},
		{
			name: "one key of one step",
			args: []string{f.file, "--key", `"b"`, "--step", "totals"},
			check: func(t *testing.T, out inspectOutput) {
				require.Len(t, out.Steps, 1)
				totals := stepKeys(t, out, "totals", 8, 2)
				require.Len(t, totals, 1)
				require.Equal(t, float64(3), countOf(t, totals["b"]))
			},
		},
		{
			name: "a key that has no state",
			args: []string{f.file, "--key", "c"},
			check: func(t *testing.T, out inspectOutput) {
				require.Len(t, out.Steps, 2)
				for _, st := range out.Steps {
					require.Empty(t, st.KeyGroups)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, r := inspectJSON(t, env, tt.args...)
			require.Equal(t, 0, r.code, "stderr:\n%s", r.stderr)
			require.Empty(t, r.stderr)
			tt.check(t, out)
			if slices.Contains(tt.args, "--pretty") {
				require.True(t, strings.HasPrefix(r.stdout, "{\n  \"checkpoint\": {\n"), r.stdout)
			} else {
				require.Equal(t, 1, strings.Count(r.stdout, "\n"), "one line of JSON")
			}
		})
	}

	before, err := os.ReadFile(f.storePath())
	require.NoError(t, err)
	_, r = inspectJSON(t, env, f.file)
	require.Equal(t, 0, r.code, r.stderr)
	after, err := os.ReadFile(f.storePath())
	require.NoError(t, err)
	require.Equal(t, before, after, "inspect changed the store")
}

// TestStateInspectCorrupt: a part that fails its checksum is reported in
// the output, the rest is shown, and the exit code is 1.
func TestStateInspectCorrupt(t *testing.T) {
	f := newWindowFixture(t)
	env := map[string]string{"EDDY_STATE_DIR": f.state}
	checkpointtest.CorruptPart(t, f.storePath(), 1, "op/per_sensor/1")
	checkpointtest.CorruptPart(t, f.storePath(), 1, "sink/windows/0")

	out, r := inspectJSON(t, env, f.file)
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `^eddy: checkpoint 1 in .*checkpoints.db: 2 part\(s\) could not be read or decoded \(see "error" in the output\): op/per_sensor/1, sink/windows/0\n$`, r.stderr)

	per := out.Steps[0]
	require.Equal(t, "per_sensor", per.ID)
	require.Len(t, per.Errors, 1)
	require.Equal(t, "op/per_sensor/1", per.Errors[0].Part)
	require.Equal(t, 1, per.Errors[0].Subtask)
	require.Regexp(t, `^checkpoint 1: part "op/per_sensor/1": corrupt checkpoint: part "op/per_sensor/1": checksum [0-9a-f]{8}, stored [0-9a-f]{8}$`, per.Errors[0].Error)
	// Subtask 0's key groups are still shown.
	require.NotEmpty(t, per.KeyGroups)
	for _, g := range per.KeyGroups {
		require.Equal(t, 0, g.Subtask)
		for _, k := range g.Keys {
			require.Equal(t, wantWindows[k.Key], windowsOf(t, k))
		}
	}
	totals := stepKeys(t, out, "totals", 8, 2)
	require.Len(t, totals, 2)

	require.Len(t, out.Sinks, 2)
	require.Regexp(t, `^checkpoint 1: part "sink/windows/0": corrupt checkpoint: .*checksum`, out.Sinks[0].Error)
	require.Empty(t, out.Sinks[0].Committables)
	require.Empty(t, out.Sinks[1].Error)
	require.Len(t, out.Sinks[1].Committables, 1)

	// --step past the corrupt parts: nothing to report.
	out, r = inspectJSON(t, env, f.file, "--step", "totals")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, stepKeys(t, out, "totals", 8, 2), 2)
}

// TestStateInspectGenerator: the checkpoint fixture's two checkpoints (a
// continuous count over a generator), chosen with --checkpoint, and keys
// that are numbers.
func TestStateInspectGenerator(t *testing.T) {
	f := newCheckpointFixture(t)
	env := map[string]string{"EDDY_STATE_DIR": f.state}
	for _, id := range []string{"1", "2"} {
		out, r := inspectJSON(t, env, f.file, "--checkpoint", id)
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, id, strings.TrimSpace(string(must(json.Marshal(out.Checkpoint.ID)))))
		require.Equal(t, []inspectSource{{ID: "numbers", Subtask: 0, Type: "generator",
			Position: &decoded{Encoding: "generator", Value: map[string]any{"subtask": float64(0), "parallelism": float64(1), "next": float64(100)}}}}, out.Sources)
		// n % 4 over 0..99: 25 of each.
		totals := stepKeys(t, out, "totals", 128, 1)
		require.Len(t, totals, 4)
		for k := range int64(4) {
			require.Equal(t, float64(25), countOf(t, totals[k]), "key %d", k)
		}
	}
	// --key 3 is the number 3 (and would be the string "3").
	out, r := inspectJSON(t, env, f.file, "--key", "3")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(2), out.Checkpoint.ID)
	totals := stepKeys(t, out, "totals", 128, 1)
	require.Len(t, totals, 1)
	require.Equal(t, float64(25), countOf(t, totals[int64(3)]))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestStateInspectErrors(t *testing.T) {
	f := newCheckpointFixture(t)
	env := map[string]string{"EDDY_STATE_DIR": f.state}
	noCheckpoints := filepath.Join(f.dir, "plain.yaml")
	require.NoError(t, os.WriteFile(noCheckpoints, []byte("version: 1\nname: plain\nsources:\n  - id: s\n    type: generator\n    count: 1\n    fields: {n: i}\nsinks:\n  - id: o\n    type: blackhole\n"), 0o644))
	notAStore := filepath.Join(f.dir, "notes.txt")
	require.NoError(t, os.WriteFile(notAStore, []byte(strings.Repeat("not a checkpoint\n", 500)), 0o644))

	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stderr string
	}{
		{"no such step", []string{f.file, "--step", "nope"}, env, 2,
			`^eddy: checkpoint 2 in .*checkpoints.db has no state of "nope"; it has: numbers, out, totals\n`},
		{"no such checkpoint", []string{f.file, "--checkpoint", "9"}, env, 2,
			`^eddy: .*checkpoints.db has no checkpoint 9 \(eddy checkpoints list shows them\)\n`},
		{"negative checkpoint", []string{f.file, "--checkpoint", "-1"}, env, 2,
			`^eddy: --checkpoint -1: want a checkpoint id`},
		{"missing path", []string{filepath.Join(f.dir, "missing.db")}, env, 2,
			`^eddy: .*missing.db does not exist: give a pipeline file, a pipeline's state dir, a checkpoints.db or a savepoint file\n`},
		{"pipeline without a checkpoint block", []string{noCheckpoints}, env, 2,
			`^eddy: .*plain.yaml: pipeline "plain" has no checkpoint block`},
		{"pipeline without checkpoints yet", []string{f.file}, map[string]string{"EDDY_STATE_DIR": t.TempDir()}, 2,
			`^eddy: pipeline "cp-cmd" has no checkpoints: .*checkpoints.db does not exist \(is the state dir right\? --state-dir or EDDY_STATE_DIR\)\n`},
		{"a directory without a store", []string{f.dir}, env, 2,
			`^eddy: .* holds no checkpoints.db: give a pipeline's state dir`},
		{"not a checkpoint file", []string{notAStore}, env, 2,
			`^eddy: open .*notes.txt for inspection: unsupported checkpoint file format: not a bbolt file .*\(give a pipeline file, `},
		{"no path", nil, env, 2,
			`^eddy: eddy state inspect takes a pipeline file, a state dir, a checkpoint store or a savepoint file, got 0 argument\(s\)\n`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, r := inspectJSON(t, tt.env, tt.args...)
			require.Equal(t, tt.code, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Empty(t, r.stdout)
			require.Regexp(t, tt.stderr, r.stderr)
		})
	}

	// A store that a running pipeline holds.
	s, err := checkpoint.Open(filepath.Dir(f.storePath()), checkpoint.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	_, r := inspectJSON(t, env, f.file)
	require.Equal(t, 1, r.code, r.stdout)
	require.Regexp(t, `^eddy: open .*checkpoints.db for inspection: in use by another eddy \(pid \d+ on .*\): state dir locked\n$`, r.stderr)
}

func TestStateCommandHelp(t *testing.T) {
	r := execute(t, nil, "state")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "eddy state inspect")
	r = execute(t, nil, "state", "inspect", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "eddy state inspect pipeline.yaml --pretty")
}
