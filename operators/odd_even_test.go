package operators

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/pipeline"
)

// configs/odd_even.yaml through the real runtime: the running sums per
// parity, row by row. The odd sink takes the changelog as retract (every
// row), the even one as upsert (no -U rows).
func TestOddEvenConfig(t *testing.T) {
	out := t.TempDir()
	t.Setenv("EDDY_OUT", out)
	spec, err := pipeline.LoadFile(pipeline.Default, "../configs/odd_even.yaml")
	require.NoError(t, err)
	r, err := pipeline.NewRunner(spec, pipeline.RunnerOptions{})
	require.NoError(t, err)
	require.NoError(t, r.Run(context.Background()))
	got := readOutputs(t, out)
	require.Len(t, got, 2)

	// odd: +I 1, then per odd number a -U of the previous sum and a +U of
	// the new one; the k-th sum is k*k.
	odd := got["odd.jsonl"]
	require.Len(t, odd, 1+2*14)
	prev := 0.0
	for k := 1; k <= 15; k++ {
		sum := float64(k * k)
		if k == 1 {
			require.Equal(t, map[string]any{"_op": "+I", "parity": "odd", "sum": sum}, odd[0])
		} else {
			i := 2*k - 3
			require.Equal(t, map[string]any{"_op": "-U", "parity": "odd", "sum": prev}, odd[i], "row %d retracts the sum before", i)
			require.Equal(t, map[string]any{"_op": "+U", "parity": "odd", "sum": sum}, odd[i+1], "row %d", i+1)
		}
		prev = sum
	}

	// even: +I 2, then one +U per even number; the k-th sum is k*(k+1).
	even := got["even.jsonl"]
	require.Len(t, even, 15)
	for k := 1; k <= 15; k++ {
		op := "+U"
		if k == 1 {
			op = "+I"
		}
		require.Equal(t, map[string]any{"_op": op, "parity": "even", "sum": float64(k * (k + 1))}, even[k-1], "row %d", k-1)
	}
}
