package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// scenarioSet is a set of scenario numbers, 1 to lastScenario: bit n for
// scenario n.
type scenarioSet uint16

// lastScenario is the number of the last scenario.
const lastScenario = 12

// allScenarios is every scenario.
const allScenarios scenarioSet = 1<<(lastScenario+1) - 2

// has reports whether scenario n is in the set.
func (s scenarioSet) has(n int) bool { return s&(1<<n) != 0 }

// classic reports whether scenarios 1 to 5, whose targets and chart need
// all five, are all in the set.
func (s scenarioSet) classic() bool { return s&0b11_1110 == 0b11_1110 }

func (s scenarioSet) String() string {
	var parts []string
	for n := 1; n <= lastScenario; n++ {
		if s.has(n) {
			parts = append(parts, strconv.Itoa(n))
		}
	}
	return strings.Join(parts, ",")
}

// Set parses a comma-separated list of scenario numbers ("6,7") or ranges
// ("1-5,8"), for flag.Var.
func (s *scenarioSet) Set(v string) error {
	var set scenarioSet
	for part := range strings.SplitSeq(v, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 1 || b > lastScenario || a > b {
			return fmt.Errorf("%q: want scenario numbers 1 to %d, as in 1-5,8", part, lastScenario)
		}
		for n := a; n <= b; n++ {
			set |= 1 << n
		}
	}
	*s = set
	return nil
}

// intList is a comma-separated list of positive integers, for flag.Var.
type intList []int

func (l *intList) String() string { return joinInts(*l) }

func (l *intList) Set(v string) error {
	var out []int
	for part := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want positive integers separated by commas", part)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// durationList is a comma-separated list of durations, for flag.Var.
type durationList []time.Duration

func (l *durationList) String() string {
	parts := make([]string, len(*l))
	for i, d := range *l {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (l *durationList) Set(v string) error {
	var out []time.Duration
	for part := range strings.SplitSeq(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return fmt.Errorf("%q: want positive durations separated by commas", part)
		}
		out = append(out, d)
	}
	*l = out
	return nil
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// makeLeases returns every combination of the counts and the TTLs, counts
// in the outer loop.
func makeLeases(counts []int, ttls []time.Duration) []leaseConfig {
	var out []leaseConfig
	for _, n := range counts {
		for _, ttl := range ttls {
			out = append(out, leaseConfig{Leases: n, TTL: ttl})
		}
	}
	return out
}

// leaseCounts and leaseTTLs give back the flags that made ls.
func leaseCounts(ls []leaseConfig) string {
	var ns []int
	for _, l := range ls {
		if len(ns) == 0 || ns[len(ns)-1] != l.Leases {
			ns = append(ns, l.Leases)
		}
	}
	return joinInts(ns)
}

func leaseTTLs(ls []leaseConfig) string {
	var ds durationList
	for _, l := range ls {
		if l.Leases != ls[0].Leases {
			break
		}
		ds = append(ds, l.TTL)
	}
	return ds.String()
}
