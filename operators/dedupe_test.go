package operators

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// dedupeOp is one step of a dedupe scenario: a batch of records (key@time,
// "-" for no event time), a watermark, or a move of the processing-time
// clock (which fires the timers that are due).
type dedupeStep struct {
	in    []string // "a@100": key a, event time 100; "a@-": processing time
	wm    int64    // when non-zero: a watermark
	clock int64    // when non-zero: the processing time moves to clock
	want  []string // the records kept, as "a@100#seq"
	state int      // keys holding state afterwards
}

func TestDedupe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []dedupeStep
	}{
		{"first of each key is kept, later ones within 10 are dropped", []dedupeStep{
			{in: []string{"a@100", "b@101", "a@105", "b@109", "a@109", "c@109"}, want: []string{"a@100#0", "b@101#1", "c@109#5"}, state: 3},
		}},
		{"a record at t0+within starts a new span", []dedupeStep{
			{in: []string{"a@100", "a@109"}, want: []string{"a@100#0"}, state: 1},
			{in: []string{"a@110", "a@119", "a@120"}, want: []string{"a@110#0", "a@120#2"}, state: 1},
		}},
		{"out of order: earlier than the kept record is a duplicate", []dedupeStep{
			{in: []string{"a@100", "a@95", "a@50"}, want: []string{"a@100#0"}, state: 1},
		}},
		{"the state goes once the watermark reaches t0+within-1", []dedupeStep{
			{in: []string{"a@100", "b@104"}, want: []string{"a@100#0", "b@104#1"}, state: 2},
			{wm: 108, state: 2},
			{wm: 109, state: 1}, // a's span [100, 110) is over
			{in: []string{"a@110", "b@113"}, want: []string{"a@110#0"}, state: 2},
			{wm: 113, state: 1},
			{wm: pipeline.MaxWatermark, state: 0},
		}},
		{"a late record of an expired key is kept", []dedupeStep{
			{in: []string{"a@100"}, want: []string{"a@100#0"}, state: 1},
			{wm: 200, state: 0},
			{in: []string{"a@105", "a@106"}, want: []string{"a@105#0"}, state: 1},
			{wm: 201, state: 0}, // its span ended long ago: the next watermark clears it
		}},
		{"a replaced span's old timer does not clear the new one", []dedupeStep{
			{in: []string{"a@100", "a@150"}, want: []string{"a@100#0", "a@150#1"}, state: 1},
			{wm: 109, state: 1},
			{in: []string{"a@155"}, state: 1},
			{wm: 159, state: 0},
		}},
		{"processing time: records without event time", []dedupeStep{
			{clock: 1_000},
			{in: []string{"a@-", "a@-", "b@-"}, want: []string{"a@-#0", "b@-#2"}, state: 2},
			{clock: 1_009, state: 2},
			{in: []string{"a@-"}, state: 2},
			{clock: 1_010, state: 0},
			{in: []string{"a@-"}, want: []string{"a@-#0"}, state: 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newKeyedHarness(t, stepYAML("dedupe: id\n    within: 10ms"))
			for i, s := range tc.steps {
				switch {
				case s.wm != 0:
					require.Empty(t, h.watermark(s.wm))
				case s.clock != 0:
					h.now = s.clock
					if h.wakeAt != 0 && h.wakeAt <= s.clock {
						h.wakeAt = 0
						out := &collector{}
						require.NoError(t, h.op.(pipeline.ProcessingTimeHandler).OnProcessingTime(s.clock, out))
						require.Empty(t, out.records)
					}
				default:
					var in []pipeline.Record
					for j, spec := range s.in {
						var key string
						var ts int64
						if k, ok := cutAt(spec, "@-"); ok {
							key, ts = k, pipeline.NoTime
						} else {
							_, err := fmt.Sscanf(spec, "%1s@%d", &key, &ts)
							require.NoError(t, err)
						}
						in = append(in, h.rec(ts, fields{"id": key, "seq": j}))
					}
					var got []string
					for _, r := range h.mustProcess(in...) {
						ts := "-"
						if r.Time != pipeline.NoTime {
							ts = fmt.Sprint(r.Time)
						}
						got = append(got, fmt.Sprintf("%s@%s#%d", r.Fields["id"], ts, r.Fields["seq"]))
					}
					require.Equal(t, s.want, got, "step %d", i)
				}
				require.Equal(t, s.state, h.keysIn(dedupeState), "keys with state after step %d", i)
			}
		})
	}
}

func cutAt(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return "", false
}

// Processing-time timers ask the task for a wake-up at the earliest one.
func TestDedupeWakeAt(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("dedupe: id\n    within: 1s"))
	h.now = 5_000
	h.mustProcess(h.rec(pipeline.NoTime, fields{"id": "a"}))
	require.Equal(t, int64(6_000), h.wakeAt)
	h.now = 5_500
	h.mustProcess(h.rec(pipeline.NoTime, fields{"id": "b"}))
	require.Equal(t, int64(6_000), h.wakeAt, "the earliest timer")
	require.NoError(t, h.op.(pipeline.ProcessingTimeHandler).OnProcessingTime(6_000, &collector{}))
	require.Equal(t, int64(6_500), h.wakeAt, "the next timer")
	require.Equal(t, 1, h.keysIn(dedupeState))
}

// Records keep everything: fields, time, key and metadata.
func TestDedupeKeepsRecords(t *testing.T) {
	h := newKeyedHarness(t, stepYAML("dedupe: [user, 'lower(order)']\n    within: 1h"))
	r := h.rec(7, fields{"user": 1, "order": "A", "x": 1.5})
	r.Meta = &expr.Meta{Offset: 3}
	dup := h.rec(8, fields{"user": 1, "order": "a"})
	other := h.rec(9, fields{"user": 2, "order": "a"})
	out := h.mustProcess(r, dup, other)
	require.Equal(t, []pipeline.Record{
		{Fields: fields{"user": 1, "order": "A", "x": 1.5}, Time: 7, Key: r.Key, Meta: &expr.Meta{Offset: 3}},
		{Fields: fields{"user": 2, "order": "a"}, Time: 9, Key: other.Key},
	}, out)
}

// The state survives a snapshot and restore, timers included.
func TestDedupeSnapshotRestore(t *testing.T) {
	step := stepYAML("dedupe: id\n    within: 10ms")
	h := newKeyedHarness(t, step)
	h.mustProcess(h.rec(100, fields{"id": "a"}), h.rec(105, fields{"id": "b"}))
	r := newKeyedHarnessRestored(t, step, h.snapshot()...)
	require.Empty(t, r.mustProcess(r.rec(101, fields{"id": "a"}), r.rec(106, fields{"id": "b"})))
	r.watermark(109)
	require.Len(t, r.mustProcess(r.rec(110, fields{"id": "a"}), r.rec(110, fields{"id": "b"})), 1)
}

func TestDedupeValidation(t *testing.T) {
	for _, tc := range []struct {
		step string
		want string
	}{
		{"dedupe: id", `t.yaml:7:5: within: give a duration of 1ms or more, how long duplicates of a kept record are dropped, e.g. within: 10m`},
		{"dedupe: id\n    within: 0", `t.yaml:9:13: within: give a duration of 1ms or more, how long duplicates of a kept record are dropped, e.g. within: 10m`},
		{"dedupe: id\n    within: 500us", `t.yaml:9:13: within: give a duration of 1ms or more, how long duplicates of a kept record are dropped, e.g. within: 10m`},
		{"dedupe: id\n    within: -1s", `t.yaml:9:13: within: duration "-1s" must not be negative`},
		{"dedupe:\n    within: 1s", `t.yaml:8:12: dedupe: give a key expression or a list of them, e.g. dedupe: order_id`},
		{"dedupe: [a, 'b +']\n    within: 1s", `t.yaml:8:20: expression "b +": unexpected token EOF`},
		{"dedupe: id\n    within: 1s\n    rebalance: true", `t.yaml:10:16: step "s": rebalance cannot be combined with dedupe, which partitions by key`},
	} {
		t.Run(tc.step, func(t *testing.T) {
			_, err := loadSteps(stepYAML(tc.step))
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
}

// Through the real runtime: event time from the source, the input hash
// partitioned over two subtasks by the key.
func TestDedupeRuntime(t *testing.T) {
	got := runPipeline(t, `version: 1
name: dedupe
parallelism: 2
sources:
  - id: in
    type: generator
    parallelism: 1
    count: 40
    fields:
      id: i % 4
      ts: i * 100
    event_time: ts
    watermark:
      interval: 0
steps:
  - id: uniq
    dedupe: id
    within: 1s
sinks:
  - id: out
    type: file
    parallelism: 1
    path: ${OUT}/out.jsonl
`)
	// Key k appears at k*100, k*100+400, ...: a span of 1s holds 3 of them,
	// so every third one is kept: ts = k*100 + 1200*j.
	var kept []int
	for _, r := range got["out.jsonl"] {
		kept = append(kept, int(r["ts"].(float64)))
	}
	var want []int
	for ts := 0; ts < 4000; ts += 100 {
		if (ts/100/4)%3 == 0 {
			want = append(want, ts)
		}
	}
	require.ElementsMatch(t, want, kept)
}
