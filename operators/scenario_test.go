package operators

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
	"github.com/eddy-stream/eddy/statestore"
	"github.com/eddy-stream/eddy/statestore/statestoretest"
)

// Data-driven window scenarios (in the manner of pebble's datadriven and
// PromQL's .test files). A file under testdata/windows/ holds a step, then
// a line "----", then commands, one per line ('#' starts a comment):
//
//	key_by: key                       the step's keys, as in a pipeline
//	window: {type: tumbling, size: 10s}
//	aggregate: {n: count()}
//	----
//	event key=a ts=1000 v=3           a record: fields name=value, ts= its event
//	                                  time (none: processing time); consecutive
//	                                  event lines are one batch
//	watermark 9999                    OnWatermark (max: the final watermark)
//	clock 12000                       set the processing time (OperatorContext.Now)
//	processing-time 12000             set it and call OnProcessingTime when the
//	                                  operator asked (WakeAt) for a time <= it
//	end                               end of input: the final watermark, Finish
//	restart                           snapshot the state backend, then restore it
//	                                  into a new backend and a new operator (a
//	                                  restore from a checkpoint; the watermark
//	                                  starts over)
//	expect                            the results emitted since the last expect,
//	{"_firing":"on_time",...}         one JSON object per line (keys sorted);
//	                                  none listed: nothing was emitted
//	expect-late                       the same for the late side output
//	expect-dropped 1                  the late-records-dropped counter
//	expect-errors 1                   records that went to on_error
//	expect-wake 20000                 the pending WakeAt request (0: none)
//
// Values are JSON when they parse as JSON (3 is an int, 2.5 a float, "a b"
// a string), else strings. Every result must be expected: the file fails
// if results are left unchecked at its end. Results of time windows must
// carry the time window_end - 1.
//
// Every file runs against every state backend (scenarioBackends), as a
// subtest named FILE/BACKEND.
func TestWindowScenarios(t *testing.T) { runScenarios(t, "testdata/windows/*.test") }

// Join scenarios (testdata/joins/*.test) hold a join step. Their records
// come from either input:
//
//	left auction=1 ts=1000            a record of the left input, keyed by
//	right id=1 ts=500                 the left (right) key expressions;
//	                                  consecutive lines of one side are one
//	                                  batch
//	expect-state 0                    the state's (key, namespace) entries
//	                                  plus its timers
//
// Their output is compared as a multiset (the order of results of one
// call is free), and each expected line of the main output carries the
// record's time as "@time".
func TestJoinScenarios(t *testing.T) { runScenarios(t, "testdata/joins/*.test") }

func runScenarios(t *testing.T, glob string) {
	files, err := filepath.Glob(glob)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".test"), func(t *testing.T) {
			for _, bk := range scenarioBackends {
				t.Run(bk.name, func(t *testing.T) { runScenario(t, f, bk.open) })
			}
		})
	}
}

// openBackend opens a state backend with opts for the test t.
type openBackend func(t testing.TB, opts statestore.Options) statestore.Backend

// scenarioBackends lists the state backends every window scenario runs
// against: a new backend adds one line here.
var scenarioBackends = []struct {
	name string
	open openBackend
}{
	{"memory", func(t testing.TB, opts statestore.Options) statestore.Backend {
		b, err := statestore.NewMemory(opts)
		require.NoError(t, err)
		return b
	}},
	{"bbolt", func(t testing.TB, opts statestore.Options) statestore.Backend {
		b, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: t.TempDir()})
		require.NoError(t, err)
		return b
	}},
	// A cache of one key: every access beyond the first key evicts, flushes
	// and loads again, so the scenarios also read values back from the file.
	{"bbolt-evicting", func(t testing.TB, opts statestore.Options) statestore.Backend {
		b, err := statestore.NewBolt(statestore.BoltOptions{Options: opts, Dir: t.TempDir(), CacheEntries: 1})
		require.NoError(t, err)
		return b
	}},
}

// scenario drives the window operator of one file.
type scenario struct {
	t        *testing.T
	file     string
	line     int
	cfg      pipeline.StepConfig
	op       pipeline.Operator
	openBk   openBackend
	backend  statestore.Backend
	out      *collector
	late     *collector
	metrics  *pipeline.Metrics
	info     pipeline.SubtaskInfo
	policy   pipeline.OnError
	keyExprs []*expr.Expr
	// join: the step is a join; sideKeys are its inputs' key expressions
	// and side the input of the batch being gathered.
	join     bool
	sideKeys [2][]*expr.Expr
	side     int
	vm       expr.VM
	clock    int64
	wake     int64
	batch    []pipeline.Record
	timeWin  bool
}

func runScenario(t *testing.T, file string, open openBackend) {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	step, script, ok := strings.Cut(string(data), "\n----\n")
	require.True(t, ok, "%s: no ---- line after the step", file)
	stepLines := 1 + strings.Count(step, "\n") + 1
	s := newScenario(t, file, step, open)
	lines := strings.Split(script, "\n")
	for i := 0; i < len(lines); i++ {
		s.line = stepLines + i + 1
		line := strings.TrimSpace(lines[i])
		if c := strings.Index(line, "#"); c >= 0 && !strings.HasPrefix(line, "{") {
			line = strings.TrimSpace(line[:c])
		}
		if line == "" {
			continue
		}
		cmd, arg, _ := strings.Cut(line, " ")
		side := slices.Index(sideNames[:], cmd)
		if cmd != "event" && (side < 0 || side != s.side) {
			s.flushBatch()
		}
		switch cmd {
		case "event":
			s.batch = append(s.batch, s.event(arg))
		case "left", "right":
			require.True(t, s.join, s.at("left and right records are for join steps; use event"))
			s.side, s.keyExprs = side, s.sideKeys[side]
			s.batch = append(s.batch, s.event(arg))
		case "expect-state":
			require.Equal(t, s.int(arg), s.stateEntries(), s.at("state entries and timers"))
		case "watermark":
			wm := pipeline.MaxWatermark
			if arg != "max" {
				wm = s.int(arg)
			}
			s.call(func() error { return s.op.(pipeline.WatermarkHandler).OnWatermark(wm, s.out) })
		case "clock":
			s.clock = s.int(arg)
		case "processing-time":
			s.clock = s.int(arg)
			s.fireProcessingTime()
		case "restart":
			s.restart()
		case "end":
			s.call(func() error { return s.op.(pipeline.WatermarkHandler).OnWatermark(pipeline.MaxWatermark, s.out) })
			s.call(func() error { return s.op.(pipeline.Finisher).Finish(s.out) })
		case "expect", "expect-late":
			var want []string
			for i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "{") {
				i++
				want = append(want, strings.TrimSpace(lines[i]))
			}
			got := s.out
			if cmd == "expect-late" {
				got = s.late
			}
			s.expect(cmd, want, got)
		case "expect-dropped":
			require.Equal(t, float64(s.int(arg)), pipeline.CounterValue(s.metrics.LateDropped(s.info)), s.at("late records dropped"))
		case "expect-errors":
			require.Equal(t, float64(s.int(arg)), pipeline.CounterValue(s.metrics.RecordErrors(s.info, s.policy)), s.at("records that failed"))
		case "expect-wake":
			require.Equal(t, s.int(arg), s.wake, s.at("pending wake-up"))
		default:
			t.Fatalf("%s: unknown command %q", s.at(""), cmd)
		}
	}
	s.flushBatch()
	s.line = 0
	s.expect("the end of the file", nil, s.out)
	s.expect("the end of the file (late)", nil, s.late)
}

func newScenario(t *testing.T, file, step string, open openBackend) *scenario {
	var body strings.Builder
	body.WriteString("  - id: s\n")
	for _, l := range strings.Split(strings.TrimRight(step, "\n"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		body.WriteString("    " + l + "\n")
	}
	spec, err := loadSteps(body.String())
	require.NoError(t, err, "%s: the step does not load", file)
	st := spec.Steps[0]
	s := &scenario{t: t, file: file, cfg: st.Config, out: &collector{}, late: &collector{}, metrics: pipeline.NewMetrics(), policy: st.OnError, openBk: open}
	s.keyExprs = st.Config.(pipeline.KeyedStep).KeyExprs(0)
	if j, ok := st.Config.(*JoinConfig); ok {
		s.join = true
		s.sideKeys = [2][]*expr.Expr{j.KeyExprs(sideLeft), j.KeyExprs(sideRight)}
	}
	if kb, ok := st.Config.(*KeyByConfig); ok && kb.plan != nil {
		s.timeWin = kb.plan.kind != kindCount && kb.plan.kind != kindGlobal
	}
	s.info = pipeline.SubtaskInfo{ID: st.ID, Parallelism: 1, MaxParallelism: 128, PipelineName: spec.Name, Logger: slog.Default(), Metrics: s.metrics}
	s.open(nil)
	return s
}

// open opens a new operator on a new backend restored from blobs.
func (s *scenario) open(blobs [][]byte) {
	t := s.t
	op, err := s.cfg.NewOperator()
	require.NoError(t, err)
	backend := s.openBk(t, statestore.Options{
		KeyGroup:  func(key string) int { return pipeline.KeyGroup(key, 128) },
		KeyGroups: [2]int{0, 128},
		Clock:     func() int64 { return s.clock },
	})
	require.NoError(t, backend.Restore(blobs...))
	oc := &pipeline.OperatorContext{
		SubtaskInfo: s.info,
		Errors:      pipeline.NewErrorHandler(s.info, s.policy, &collector{}),
		Side: func(name string) pipeline.Emitter {
			require.Equal(t, lateSide, name, "the only side output of a window")
			return s.late
		},
		Now: func() int64 { return s.clock },
		WakeAt: func(at int64) {
			if s.wake == 0 || at < s.wake {
				s.wake = at
			}
		},
		KeyedState: func() (statestore.Backend, error) { return backend, nil },
	}
	s.wake = 0
	require.NoError(t, op.Open(context.Background(), oc))
	s.op, s.backend = op, backend
	t.Cleanup(func() {
		require.NoError(t, op.Close())
		require.NoError(t, backend.Close())
	})
}

// restart snapshots the backend and restores it into a new operator.
func (s *scenario) restart() {
	snap, err := s.backend.Snapshot()
	require.NoError(s.t, err)
	_, blobs, err := statestoretest.Blobs(snap)
	require.NoError(s.t, err)
	snap.Release()
	s.open(blobs)
}

func (s *scenario) at(what string) string {
	return fmt.Sprintf("%s:%d: %s", s.file, s.line, what)
}

func (s *scenario) int(arg string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(arg), 10, 64)
	require.NoError(s.t, err, s.at("want a number"))
	return n
}

// event parses "name=value ..." into a keyed record, as the runtime's hash
// partitioning would key it.
func (s *scenario) event(arg string) pipeline.Record {
	r := pipeline.Record{Fields: map[string]any{}, Time: pipeline.NoTime}
	for _, kv := range splitArgs(arg) {
		name, val, ok := strings.Cut(kv, "=")
		require.True(s.t, ok, s.at("event arguments are name=value"))
		if name == "ts" {
			r.Time = s.int(val)
			continue
		}
		r.Fields[name] = parseValue(val)
	}
	vals := make([]any, len(s.keyExprs))
	for i, e := range s.keyExprs {
		v, err := s.vm.Eval(e, r.Fields)
		require.NoError(s.t, err, s.at("key"))
		vals[i] = v
	}
	var key []byte
	var err error
	if len(vals) == 1 {
		key, err = pipeline.EncodeKey(nil, vals[0])
	} else {
		key, err = pipeline.EncodeKey(nil, vals)
	}
	require.NoError(s.t, err, s.at("key"))
	r.Key = string(key)
	return r
}

// splitArgs splits at spaces outside double quotes.
func splitArgs(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, c := range s {
		switch {
		case c == '"':
			quoted = !quoted
			cur.WriteRune(c)
		case c == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// parseValue reads JSON (ints as int64), else takes the text as a string.
func parseValue(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	var x any
	if err := json.Unmarshal([]byte(v), &x); err == nil {
		return x
	}
	return v
}

func (s *scenario) flushBatch() {
	if len(s.batch) == 0 {
		return
	}
	b := s.batch
	s.batch = nil
	if s.join {
		s.call(func() error { return s.op.(pipeline.MultiInputOperator).ProcessInput(s.side, b, s.out) })
		return
	}
	s.call(func() error { return s.op.Process(b, s.out) })
}

// stateEntries counts the (key, namespace) entries of every state of the
// backend and its timers.
func (s *scenario) stateEntries() int64 {
	return int64(stateEntries(s.t, s.backend) + timerCount(s.backend, s.info.ID))
}

// stateEntries counts the (key, namespace) entries of every state of b
// (over its key groups), what an operator holds besides its timers.
func stateEntries(tb testing.TB, b statestore.Backend) int {
	n := 0
	start, end := b.KeyGroupRange()
	for _, name := range b.StateNames() {
		st, err := b.State(name)
		require.NoError(tb, err)
		for g := start; g < end; g++ {
			for key := range st.Keys(g) {
				for range st.Namespaces(key) {
					n++
				}
			}
		}
	}
	return n
}

// timerCount counts the timers of the timer service id of b.
func timerCount(b statestore.Backend, id string) int {
	ts := b.TimerService(id)
	return ts.Len(statestore.EventTime) + ts.Len(statestore.ProcessingTime)
}

// call runs one operator call and checks it emitted at most once per output.
func (s *scenario) call(f func() error) {
	out, late := s.out.emits, s.late.emits
	require.NoError(s.t, f(), s.at("operator call"))
	require.LessOrEqual(s.t, s.out.emits-out, 1, s.at("one emit per call"))
	require.LessOrEqual(s.t, s.late.emits-late, 1, s.at("one late emit per call"))
}

// fireProcessingTime calls OnProcessingTime as the runtime does: when the
// requested wake-up is due.
func (s *scenario) fireProcessingTime() {
	if s.wake == 0 || s.wake > s.clock {
		return
	}
	s.wake = 0
	pth := s.op.(pipeline.ProcessingTimeHandler)
	s.call(func() error { return pth.OnProcessingTime(s.clock, s.out) })
}

func (s *scenario) expect(what string, want []string, got *collector) {
	s.t.Helper()
	lines := make([]string, 0, len(got.records))
	for _, r := range got.records {
		fields := r.Fields
		if s.join && got == s.out {
			fields = maps.Clone(fields)
			fields["@time"] = r.Time
		}
		b, err := json.Marshal(fields)
		require.NoError(s.t, err)
		lines = append(lines, string(b))
		if end, ok := r.Fields[fieldWindowEnd].(int64); ok && s.timeWin && got == s.out {
			require.Equal(s.t, end-1, r.Time, s.at("a time window's result has the time window_end - 1: "+string(b)))
		}
	}
	got.records = nil
	if want == nil {
		want = []string{}
	}
	if s.join {
		want = slices.Sorted(slices.Values(want))
		slices.Sort(lines)
	}
	if !slices.Equal(want, lines) {
		s.t.Fatalf("%s: %s:\nwant:\n%s\ngot:\n%s", s.at(""), what, strings.Join(want, "\n"), strings.Join(lines, "\n"))
	}
}
