package stats

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	require.Equal(t, 2.0, Median(xs))
	require.Equal(t, []float64{3, 1, 2}, xs, "not changed")
	require.Equal(t, 2.5, Median([]float64{4, 1, 3, 2}))
	require.Equal(t, 7.0, Median([]float64{7}))
}

func TestMeanCI(t *testing.T) {
	mean, half := MeanCI([]float64{1, 2, 3})
	require.Equal(t, 2.0, mean)
	// sd 1, t(2) = 4.303, n 3: 4.303 / sqrt(3).
	require.InDelta(t, 2.4843, half, 1e-4)
}
