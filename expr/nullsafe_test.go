package expr

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNullSafe: with want "nullsafe", a field of a nil top-level name is
// nil; without it, the access fails.
func TestNullSafe(t *testing.T) {
	env := map[string]any{"left": map[string]any{"a": 1}, "right": nil}
	var vm VM

	safe := &Expr{Source: "right.seller ?? left.a"}
	require.NoError(t, safe.Compile(nil, "nullsafe"))
	got, err := vm.Eval(safe, env)
	require.NoError(t, err)
	require.Equal(t, 1, got)

	safe = &Expr{Source: "[left.a, right.seller]"}
	require.NoError(t, safe.Compile(nil, "nullsafe"))
	got, err = vm.Eval(safe, env)
	require.NoError(t, err)
	require.Equal(t, []any{1, nil}, got)

	plain := &Expr{Source: "right.seller"}
	require.NoError(t, plain.Compile(nil, ""))
	_, err = vm.Eval(plain, env)
	require.Error(t, err)
}
