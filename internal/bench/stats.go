package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentiles holds the p50 and p99 of a set of durations.
type percentiles struct {
	N        int
	P50, P99 time.Duration
}

// summarize returns the p50 and p99 of samples by the nearest-rank method
// (the smallest sample with at least p% of the samples at or below it). It
// sorts samples in place. Zero samples give zero percentiles.
func summarize(samples []time.Duration) percentiles {
	slices.Sort(samples)
	return percentiles{N: len(samples), P50: rank(samples, 50), P99: rank(samples, 99)}
}

// rank returns the p-th percentile of the sorted samples.
func rank(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ms returns d in milliseconds, for tables and charts.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// formatMS formats a value in milliseconds with three significant digits.
func formatMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.3f ms", v)
}
