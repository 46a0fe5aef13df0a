package operators

import (
	"testing"

	"github.com/eddy-stream/eddy/pipeline"
	"github.com/stretchr/testify/require"
)

// Invalid steps fail to load with every problem at FILE:LINE:COL. The step
// text starts at line 7 of t.yaml; its kind key is on line 8, column 5.
func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		step string
		want string
	}{
		{"filter: 1 + 2", `t.yaml:8:13: expression "1 + 2": expected bool, but got int`},
		{"filter: temp >", `t.yaml:8:18: expression "temp >": unexpected token EOF`},
		{"filter:", `t.yaml:8:12: filter: give a bool expression, e.g. filter: temp > 30`},
		{"filter: ''", `t.yaml:8:13: filter: the expression is empty`},
		{"filter: [a]", `t.yaml:8:13: filter: an expression must be a string, not a list`},

		{"set: {}", `t.yaml:8:10: set: needs at least one field`},
		{"set:", `t.yaml:8:9: set: give at least one field: expression, e.g. set: {temp_c: (temp - 32) * 5 / 9}`},
		{"set: {x: '1 +'}", `t.yaml:8:17: expression "1 +": unexpected token EOF`},
		{"set: {user.email: 1}", `t.yaml:8:10: set: field "user.email": set works on top-level fields, so a name cannot contain '.'; ` +
			`to change a nested field, rebuild its parent with set, e.g. user: '{"email": ..., "other": user.other}'`},
		{"set: {a: 1, '': 2}", `t.yaml:8:10: set: a field name is empty`},

		{"map: {}", `t.yaml:8:10: map: needs at least one field`},
		{"map:", `t.yaml:8:9: map: give at least one field: expression, e.g. map: {id: sensor_id}`},
		{"map: {a: 1, a: 2}", `t.yaml:8:10: map: field "a" is listed twice`},
		{"map: [a]", `t.yaml:8:10: map: must be a mapping of field names to expressions, not a list`},
		{"map: {a: ''}", `t.yaml:8:10: map: a: the expression is empty`},

		{"drop: []", `t.yaml:8:11: drop: give a field name or a list of them, e.g. drop: [email, phone]`},
		{"drop: {a: 1}", `t.yaml:8:11: drop: must be a string or a list of strings, not a mapping`},
		{"drop: [a, a, b.c.d]", "t.yaml:8:11: drop: field \"a\" is listed twice\n" +
			`t.yaml:8:11: drop: field "b.c.d": drop works on top-level fields, so a name cannot contain '.'`},

		{"flat_map: 1 + 2", `t.yaml:8:15: flat_map: expression "1 + 2" returns int, not a list`},
		{"flat_map:", `t.yaml:8:14: flat_map: give an expression that returns a list, e.g. flat_map: items`},

		{"key_by: []", `t.yaml:8:13: key_by: give at least one key expression`},
		{"key_by:", `t.yaml:8:12: key_by: give a key expression or a list of them, e.g. key_by: sensor_id`},
		{"key_by: [a, [b]]", `t.yaml:8:13: key_by: key 2: an expression must be a string, not a list`},
		{"key_by: [a, 'b +']", `t.yaml:8:20: expression "b +": unexpected token EOF`},
		{"key_by: id\n    windw: {type: tumbling, size: 10s}", `t.yaml:9:5: unknown key "windw" in step "s" (key_by) (did you mean "window"?)`},
		{"key_by: id\n    rebalance: true", `t.yaml:9:16: step "s": rebalance cannot be combined with key_by, which partitions by key`},

		{"filter: x\n    map: {a: 1}", `t.yaml:9:5: steps[0] has both "filter" and "map": a step does one thing, split it into two steps`},
		{"filter: x\n    fliter: y", `t.yaml:9:5: unknown key "fliter" in step "s" (filter) (did you mean "filter"?)`},
	} {
		t.Run(tc.step, func(t *testing.T) {
			_, err := loadSteps(stepYAML(tc.step))
			require.ErrorIs(t, err, pipeline.ErrInvalid)
			require.EqualError(t, err, tc.want)
		})
	}
}

// Every kind is in the Env with a summary, and a fresh config of each fails
// Validate (every kind needs its key) rather than panicking.
func TestRegister(t *testing.T) {
	env := pipeline.NewEnv()
	Register(env)
	require.Equal(t, []string{"dedupe", "drop", "filter", "flat_map", "join", "key_by", "map", "set"}, env.StepKinds())
	for _, kind := range env.StepKinds() {
		p, ok := env.Step(kind)
		require.True(t, ok)
		require.NotEmpty(t, p.Summary, kind)
		def, ok := pipeline.Default.Step(kind)
		require.True(t, ok, "init registers %s in pipeline.Default", kind)
		require.Equal(t, kind, def.Kind)
		cfg := p.New()
		require.Contains(t, pipeline.Keys(cfg), kind, "the config owns the kind's key")
		require.Error(t, cfg.Validate(), kind)
	}
}
