package expr_test

import (
	"math"
	"testing"

	"github.com/eddy-stream/eddy/expr"
	"github.com/stretchr/testify/require"
)

func TestCheckFinite(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		err  string // "" when finite
	}{
		{"nil", nil, ""},
		{"int", 7, ""},
		{"float", 0.5, ""},
		{"string", "NaN", ""},
		{"+Inf", math.Inf(1), "the result is +Inf, not a finite number (a division by zero?)"},
		{"-Inf float32", float32(math.Inf(-1)), "the result is -Inf, not a finite number (a division by zero?)"},
		{"NaN", math.NaN(), "the result is NaN, not a finite number (a division by zero?)"},
		{"finite nested", map[string]any{"a": []any{1, 2.5, map[string]any{"b": "x"}}}, ""},
		{"nested", map[string]any{"a": []any{1, map[string]any{"b": math.NaN()}}},
			`the result holds NaN at "a.1.b", not a finite number (a division by zero?)`},
		{"in a list", []any{1.0, math.Inf(1)}, `the result holds +Inf at "1", not a finite number (a division by zero?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := expr.CheckFinite(tc.v)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, expr.ErrNotFinite)
			require.EqualError(t, err, tc.err)
		})
	}
}

// Checking a finite result allocates nothing: it runs for every expression
// a step evaluates.
func TestCheckFiniteDoesNotAllocate(t *testing.T) {
	v := any(map[string]any{"a": []any{1, 2.5, "x"}, "b": 3.5})
	f := any(2.5)
	allocs := testing.AllocsPerRun(100, func() {
		if expr.CheckFinite(v) != nil || expr.CheckFinite(f) != nil {
			t.Fatal("finite values reported")
		}
	})
	require.Zero(t, allocs)
}

// EvalRecord fails a record whose expression gives a non-finite float.
func TestEvalRecordRejectsNonFinite(t *testing.T) {
	var vm expr.VM
	fields := map[string]any{"a": 1, "b": 0}
	_, err := vm.EvalRecord(expr.MustExpr("a / b"), fields, nil)
	require.ErrorIs(t, err, expr.ErrNotFinite)
	v, err := vm.EvalRecord(expr.MustExpr("b / a"), fields, nil)
	require.NoError(t, err)
	require.Equal(t, 0.0, v)
}
