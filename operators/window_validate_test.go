package operators

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/expr"
	"github.com/eddy-stream/eddy/pipeline"
)

// Invalid windows fail to load with each problem at the key it is about.
// The step starts at line 7 of t.yaml; its second line is line 8.
func TestWindowValidation(t *testing.T) {
	const agg = "key_by: id\n    aggregate: {n: count()}\n    " // window on line 10
	for _, tc := range []struct{ step, want string }{
		{"key_by: id\n    window: {type: tumbling, size: 10s}",
			`t.yaml:9:13: window: a window needs an aggregate that says what to compute per key and window, e.g. aggregate: {n: count(), avg_temp: avg(temp)}`},
		{agg + "window: {size: 10s}", `t.yaml:10:13: window: give the window's type: tumbling, sliding, session, count or global`},
		{agg + "window: {type: hopping, size: 10s}", `t.yaml:10:20: window.type: unknown window type "hopping": use tumbling, sliding, session, count or global`},
		{agg + "window: {type: tumbling, size: 10s, slide: 2s}", `t.yaml:10:48: window.slide: tumbling windows have no slide; use type: sliding for windows that overlap`},
		{agg + "window: {type: tumbling, size: 10}", `t.yaml:10:36: window.size: "10" is not a duration (examples: 200ms, 10s, 5m, 1h, 2d)`},
		{agg + "window: {type: tumbling, size: [1]}", `t.yaml:10:36: size: must be a duration such as 10s (a number of records for count windows), not a list`},
		{agg + "window: {type: tumbling, size: 10s, offset: 11s}", `t.yaml:10:49: window.offset: must be shorter than the size (between -10s and 10s, exclusive)`},
		{agg + "window: {type: tumbling, size: 10s, gap: 3s}", `t.yaml:10:46: window.gap: tumbling windows have no gap (session windows do)`},
		{agg + "window: {type: sliding, size: 10s}", `t.yaml:10:13: window: give the slide of a sliding window, e.g. size: 10s, slide: 2s (use type: tumbling for slide = size)`},
		{agg + "window: {type: sliding, size: 10s, slide: 20s}", `t.yaml:10:47: window.slide: 20s is larger than the size 10s: records between windows would belong to none`},
		{agg + "window: {type: sliding, size: 10s, slide: 3001ms}", `t.yaml:10:47: window.slide: a window of size 10s sliding by 3001ms is built from 10000 panes of 1ms (their greatest common divisor); choose a slide that divides the size, or at most 1000 panes`},
		{agg + "window: {type: session}", `t.yaml:10:13: window: give the session gap, e.g. gap: 30s`},
		{agg + "window: {type: session, gap: 0}", `t.yaml:10:34: window.gap: must be positive`},
		{agg + "window: {type: count, size: 10s}", `t.yaml:10:33: window.size: "10s" is not a number of records (count windows count records, e.g. size: 100)`},
		{agg + "window: {type: count, size: 10, slide: 11}", `t.yaml:10:44: window.slide: must be between 1 and the size (10)`},
		{agg + "window: {type: count, size: 10}\n    allowed_lateness: 5s", `t.yaml:11:23: allowed_lateness: count windows are never late: allowed_lateness applies to tumbling, sliding and session windows`},
		{agg + "window: {type: count, size: 10}\n    late_output: late", `t.yaml:11:18: late_output: count windows are never late: late_output applies to tumbling, sliding and session windows`},
		{agg + "window: {type: count, size: 10}\n    trigger: {early_every: 1s}", `t.yaml:11:28: trigger.early_every: count windows fire on counts, not on time`},
		{agg + "window: {type: global}", `t.yaml:10:13: window: a global window never ends: give it a trigger, e.g. trigger: {count: 100} or trigger: {every: 10s}`},
		{agg + "window: {type: global}\n    trigger: {count: 0, early_every: 1s}", "t.yaml:11:22: trigger.count: must be at least 1\n" +
			`t.yaml:11:38: trigger.early_every: a global window fires only early: use trigger.every`},
		{agg + "window: {type: tumbling, size: 10s}\n    trigger: {count: 5}", `t.yaml:11:22: trigger.count: fires global windows; tumbling windows fire on their own (early results: trigger.early_every)`},
		{agg + "window: {type: tumbling, size: 10s}\n    trigger: {}", `t.yaml:11:14: trigger: give early_every, e.g. trigger: {early_every: 5s}`},
		{agg + "window: {type: tumbling, size: 10s}\n    allowed_lateness: -1s", `t.yaml:11:23: allowed_lateness: duration "-1s" must not be negative`},
		{agg + "window: {type: session, gap: 5s}\n    late_output: a.b", `t.yaml:11:18: late_output: "a.b": name the stream with letters, digits, '_' and '-' (no '.'), e.g. late_output: late_readings`},
		// A late_output id that another source, step or stream has.
		{agg + "window: {type: tumbling, size: 10s}\n    late_output: in", `t.yaml:7:9: id "in" is already used at line 4`},
		{"key_by: id\n    late_output: x", `t.yaml:9:18: late_output: applies to windows: add a window, e.g. window: {type: tumbling, size: 10s}`},
		{"key_by: id\n    allowed_lateness: 1s", `t.yaml:9:23: allowed_lateness: applies to windows: add a window, e.g. window: {type: tumbling, size: 10s}`},
		{"key_by: id\n    aggregate: {p: 'reduce(acc * x, 1)'}\n    window: {type: session, gap: 5s}",
			`t.yaml:9:20: aggregate.p: reduce needs a merge expression over acc and other to combine partial results, e.g. reduce(acc * x, 1, acc * other)`},
		{"key_by: id\n    aggregate: {window_start: count()}\n    window: {type: session, gap: 5s}",
			`t.yaml:9:31: aggregate.window_start: the output field "window_start" is already the window's: rename the aggregate`},
		{"key_by: id\n    aggregate: {id: count()}\n    window: {type: session, gap: 5s}",
			`t.yaml:9:21: aggregate.id: the output field "id" is already the key's: rename the aggregate`},
		{"key_by: [a, a]\n    aggregate: {n: count()}\n    window: {type: tumbling, size: 10s}", `t.yaml:8:13: key_by: the key names the output field "a" twice`},
	} {
		t.Run(tc.step, func(t *testing.T) {
			_, err := loadSteps(stepYAML(tc.step))
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
}

// Valid windows resolve to their plan; reduce without merge is fine where
// nothing merges.
func TestWindowPlans(t *testing.T) {
	for _, tc := range []struct {
		step string
		want windowPlan
	}{
		{"window: {type: tumbling, size: 10s, offset: -2s}", windowPlan{kind: kindTumbling, size: 10000, slide: 10000, offset: -2000, pane: 10000}},
		{"window: {type: sliding, size: 10s, slide: 2s}\n    allowed_lateness: 1m", windowPlan{kind: kindSliding, size: 10000, slide: 2000, pane: 2000, lateness: 60000}},
		{"window: {type: sliding, size: 10s, slide: 4s}\n    trigger: {early_every: 1s}", windowPlan{kind: kindSliding, size: 10000, slide: 4000, pane: 2000, early: 1000}},
		{"window: {type: session, gap: 30s}", windowPlan{kind: kindSession, gap: 30000}},
		{"window: {type: count, size: 10, slide: 4}", windowPlan{kind: kindCount, size: 10, slide: 4, pane: 2}},
		{"window: {type: count, size: 10}", windowPlan{kind: kindCount, size: 10, slide: 10, pane: 10}},
		{"window: {type: global}\n    trigger: {count: 5, every: 1m}", windowPlan{kind: kindGlobal, trigCount: 5, trigEvery: 60000}},
	} {
		t.Run(tc.step, func(t *testing.T) {
			spec, err := loadSteps(stepYAML("key_by: id\n    aggregate: {p: 'reduce(acc * x, 1)'}\n    " + tc.step))
			if tc.want.kind == kindSliding || tc.want.kind == kindSession || tc.want.slide != tc.want.size {
				require.Error(t, err, "reduce without merge")
				spec, err = loadSteps(stepYAML("key_by: id\n    aggregate: {p: 'reduce(acc * x, 1, acc * other)'}\n    " + tc.step))
			}
			require.NoError(t, err)
			c := spec.Steps[0].Config.(*KeyByConfig)
			tc.want.keyNames = []string{"id"}
			require.Equal(t, &tc.want, c.plan)
		})
	}
}

func TestKeyFieldNames(t *testing.T) {
	keys := func(srcs ...string) KeyList {
		l := make(KeyList, len(srcs))
		for i, s := range srcs {
			l[i] = expr.Expr{Source: s}
		}
		return l
	}
	require.Equal(t, []string{"id"}, keyFieldNames(keys("id")))
	require.Equal(t, []string{"key"}, keyFieldNames(keys("lower(id)")))
	require.Equal(t, []string{"key"}, keyFieldNames(keys("_key")))
	require.Equal(t, []string{"region", "key_2", "site"}, keyFieldNames(keys("region", "id % 4", "site")))
	require.Equal(t, []string{"key", "key_2"}, keyFieldNames(keys("a.b", "true")))
}

// late_output declares the side stream "late" of the step.
func TestWindowSideOutputs(t *testing.T) {
	spec, err := loadSteps(stepYAML("key_by: id\n    aggregate: {n: count()}\n    window: {type: tumbling, size: 10s}\n    late_output: late_readings") +
		"  - id: use_late\n    from: late_readings\n    filter: 'true'\n")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"late_readings": "late"}, spec.Steps[0].Config.(pipeline.SideOutputter).SideOutputs())
	require.Equal(t, []pipeline.StreamRef{{Node: "s", Side: "late"}}, spec.Steps[1].Inputs)
	require.Nil(t, (&KeyByConfig{}).SideOutputs())
}

// Namespaces round-trip, are ASCII and sort like their numbers.
func TestNamespaceEncoding(t *testing.T) {
	prev := ""
	for _, v := range []int64{math.MinInt64, -1 << 40, -10001, -1, 0, 1, 127, 128, 10000, 1 << 50, math.MaxInt64} {
		ns := encodeNS(tagEvent, v)
		require.Len(t, ns, nsLen)
		for i := range len(ns) {
			require.Less(t, ns[i], byte(0x80), "ASCII")
		}
		tag, got := decodeNS(ns)
		require.Equal(t, byte(tagEvent), tag)
		require.Equal(t, v, got)
		require.Less(t, prev, ns)
		prev = ns
	}
}
