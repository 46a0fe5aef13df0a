package operators

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// joinYAML is a join step over the test source "in" (both sides) with the
// given lines added under join: (indented by the caller) and the step.
func joinYAML(join, step string) string {
	s := "  - id: s\n    join:\n      left: in\n      right: in\n" + join
	return s + step
}

// Invalid join steps fail to load with every problem at FILE:LINE:COL.
// The step starts at line 7 of t.yaml; join's first own key (left) is on
// line 9, so the lines a case adds start at line 11.
func TestJoinValidation(t *testing.T) {
	on := "      on: {left: a, right: b}\n"
	for _, tc := range []struct {
		name, join, step, want string
	}{
		{"no key", "", "", `t.yaml:9:7: join: give each side's key, e.g. on: {left: auction, right: id}`},
		{"key parts", "      on: {left: [a, b], right: c}\n", "", `t.yaml:11:11: join.on: the left key has 2 parts and the right 1: give both sides the same number`},
		{"type", on + "      type: outer\n", "", `t.yaml:12:13: join.type: unknown join type "outer": use inner, left, right or full`},
		{"two kinds", on + "      between: {lower: 0s, upper: 1s}\n      window: {type: tumbling, size: 1s}\n", "",
			`t.yaml:13:15: join.window: a join is one of interval (between), window or temporal, not between and window`},
		{"ttl of interval", on + "      between: {lower: 0s, upper: 1s}\n      ttl: 1h\n", "",
			`t.yaml:13:12: join.ttl: applies to a regular join (no between, window or temporal): the interval join's state is cleared by the watermark`},
		{"lateness of regular", on, "    allowed_lateness: 1s\n",
			`t.yaml:12:23: allowed_lateness: a regular join has no event-time bound: every record joins`},
		{"late output of regular", on, "    late_output: late\n",
			`t.yaml:12:18: late_output: a regular join has no event-time bound: no record is late`},
		{"empty interval", on + "      between: {lower: 2s, upper: 1s}\n", "",
			`t.yaml:12:16: join.between: the interval [2s, 1s] is empty: lower must not pass upper`},
		{"exclusive empties", on + "      between: {lower: 1s, upper: 1s, upper_exclusive: true}\n", "",
			`t.yaml:12:16: join.between: the interval [1s, 1s] is empty: lower must not pass upper`},
		{"missing bound", on + "      between: {lower: -5s}\n", "",
			`t.yaml:12:16: join.between: give the upper bound, e.g. between: {lower: -5s, upper: 10s}`},
		{"count window", on + "      window: {type: count, size: 10}\n", "",
			`t.yaml:12:22: join.window.type: a window join takes tumbling, sliding or session windows, not count`},
		{"window size", on + "      window: {type: tumbling}\n", "",
			`t.yaml:12:15: join.window: give the window's size, e.g. size: 10s`},
		{"full temporal", on + "      type: full\n      temporal: {}\n", "",
			`t.yaml:12:13: join.type: a temporal join is inner or left: every left record looks up the right row valid at its time`},
		{"select name", on + "      select: {a.b: left.x}\n", "",
			`t.yaml:12:15: join.select: field "a.b": join.select works on top-level fields, so a name cannot contain '.'; ` +
				`to change a nested field, rebuild its parent with set, e.g. a: '{"b": ..., "other": a.other}'`},
		{"select _op", on + "      select: {_op: left.x}\n", "",
			`t.yaml:12:15: join.select: _op is the changelog kind of every row a regular join emits; name the field otherwise`},
		{"from", on, "    from: in\n", `t.yaml:12:11: step "s": a join step names its inputs in join.left and join.right, not from`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadSteps(joinYAML(tc.join, tc.step))
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
}

// An unknown input stream is reported at the key that names it.
func TestJoinUnknownInput(t *testing.T) {
	_, err := loadSteps("  - id: s\n    join:\n      left: in\n      right: inn\n      on: {left: a, right: b}\n")
	require.EqualError(t, err, `t.yaml:10:14: step "s": join.right "inn": no source, step or side stream has that id (did you mean "in"?)`)
}

// Each side is partitioned by its own key; the plan puts a hash edge on
// each input with that side's key, and never chains the join.
func TestJoinPlanHashesEachSide(t *testing.T) {
	spec, err := loadSteps(joinYAML("      on: {left: a, right: 'b + 1'}\n      between: {lower: 0s, upper: 1s}\n", ""))
	require.NoError(t, err)
	plan, err := pipeline.Compile(spec)
	require.NoError(t, err)
	n := plan.Node("s")
	require.Len(t, n.Inputs, 2)
	for i, want := range []string{"a", "b + 1"} {
		e := n.Inputs[i]
		require.Equal(t, pipeline.Hash, e.Partition)
		require.Equal(t, i, e.Input)
		require.False(t, e.Chained)
		require.Len(t, e.KeyExprs, 1)
		require.Equal(t, want, e.KeyExprs[0].Source)
	}
}
