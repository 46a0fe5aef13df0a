// Package stats holds the statistics the benchmark commands report: the
// machines they run on are noisy, so they compare runs in pairs and report
// the mean of the pairs' ratios with a confidence interval.
package stats

import (
	"math"
	"slices"
)

// Median returns the median of xs (the mean of the middle two for an even
// count): with a few rounds of a noisy benchmark, one outlier moves it
// less than the mean. xs must not be empty; it is not changed.
func Median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MeanCI returns the mean of xs and the half-width of its 95% confidence
// interval (Student's t, the pairs taken as independent samples).
func MeanCI(xs []float64) (mean, half float64) {
	n := float64(len(xs))
	for _, x := range xs {
		mean += x
	}
	mean /= n
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / (n - 1))
	return mean, tQuantile975(len(xs)-1) * sd / math.Sqrt(n)
}

// tQuantile975 is the 97.5th percentile of Student's t with df degrees of
// freedom (df >= 1), rounded up beyond 30.
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	switch {
	case df <= len(table):
		return table[df-1]
	case df <= 60:
		return 2.040
	}
	return 2.000
}
