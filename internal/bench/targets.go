package main

import (
	"fmt"
	"strings"
	"time"
)

// The project's targets for quorumlock (see docs/benchmarks.md).
const (
	maxUncontendedVsFloor = 1.0                    // target 1: p50 at most this × the floor's
	maxSlowedLockP50      = 2 * time.Millisecond   // target 2
	maxIdleGapP50         = 500 * time.Microsecond // target 3
	maxWaitP99            = 100 * time.Millisecond // target 3
	minFairness           = 0.5                    // target 3: least/busiest worker turns
	minHandoffsVsRedsync  = 1.5                    // target 3
	minDistinctVsFloor    = 0.8                    // target 4
)

// check is one target, evaluated on a run.
type check struct {
	ID       string
	Target   string
	Measured string
	Pass     bool
}

// checks evaluates the targets of the scenarios that ran: those of 1 to 5
// when all five ran, then those of 6 to 12.
func (r *report) checks() []check {
	var cs []check
	if r.Settings.run.classic() {
		cs = r.classicChecks()
	}
	cs = append(cs, r.loadChecks()...)
	cs = append(cs, r.primitiveChecks()...)
	return append(cs, r.firstLockCheck()...)
}

// classicChecks evaluates the targets of scenarios 1 to 5. The last one is
// not a performance target but the safety check of the contended scenario:
// no library may let two workers in at once.
func (r *report) classicChecks() []check {
	q, rs, fl := libQuorumlock, libRedsync, libFloor
	un, unNew, sl, co, di, al := r.Uncontended, r.UncontendedNew, r.Slowed, r.Contended, r.Distinct, r.Allocs
	least, busiest, fair := co[q].Fairness()
	unRatio := ms(un[q].P50) / ms(un[fl].P50)
	unNewRatio := ms(unNew[q].P50) / ms(unNew[fl].P50)
	hoRatio := co[q].HandoffsPerSec() / co[rs].HandoffsPerSec()
	diRatio := di[q].PerSec() / di[fl].PerSec()
	var overlaps []string
	noOverlap := true
	for _, c := range co {
		overlaps = append(overlaps, fmt.Sprintf("%s %d", c.Name, c.Overlaps))
		noOverlap = noOverlap && c.Overlaps == 0
	}
	return []check{
		{
			ID:       "1",
			Target:   fmt.Sprintf("uncontended lock+unlock p50 ≤ %.1f× raw floor's", maxUncontendedVsFloor),
			Measured: fmt.Sprintf("%s vs %s: %s", formatMS(ms(un[q].P50)), formatMS(ms(un[fl].P50)), targetRatio(unRatio, maxUncontendedVsFloor)),
			Pass:     unRatio <= maxUncontendedVsFloor,
		},
		{
			ID:       "1b",
			Target:   fmt.Sprintf("uncontended, a new lock per call: lock+unlock p50 ≤ %.1f× raw floor's", maxUncontendedVsFloor),
			Measured: fmt.Sprintf("%s vs %s: %s", formatMS(ms(unNew[q].P50)), formatMS(ms(unNew[fl].P50)), targetRatio(unNewRatio, maxUncontendedVsFloor)),
			Pass:     unNewRatio <= maxUncontendedVsFloor,
		},
		{
			ID:       "2",
			Target:   fmt.Sprintf("one node slowed by %v: lock p50 ≤ %v", r.Settings.slowDelay, maxSlowedLockP50),
			Measured: formatMS(ms(sl[q].P50)),
			Pass:     sl[q].P50 <= maxSlowedLockP50,
		},
		{
			ID:       "3a",
			Target:   "contended: no failed Lock call",
			Measured: fmt.Sprintf("%d failed", co[q].Failed.N),
			Pass:     co[q].Failed.N == 0,
		},
		{
			ID:       "3b",
			Target:   fmt.Sprintf("contended: idle gap p50 ≤ %v", maxIdleGapP50),
			Measured: formatMS(ms(co[q].Gap.P50)),
			Pass:     co[q].Gap.P50 <= maxIdleGapP50,
		},
		{
			ID:       "3c",
			Target:   fmt.Sprintf("contended: wait p99 ≤ %v", maxWaitP99),
			Measured: formatMS(ms(co[q].Wait.P99)),
			Pass:     co[q].Wait.P99 <= maxWaitP99,
		},
		{
			ID:       "3d",
			Target:   fmt.Sprintf("contended: least/busiest worker turns ≥ %.1f", minFairness),
			Measured: fmt.Sprintf("%d/%d = %.2f", least, busiest, fair),
			Pass:     fair >= minFairness,
		},
		{
			ID:       "3e",
			Target:   fmt.Sprintf("contended: hand-offs/s ≥ %.1f× redsync's", minHandoffsVsRedsync),
			Measured: fmt.Sprintf("%s vs %s: %s", formatRate(co[q].HandoffsPerSec()), formatRate(co[rs].HandoffsPerSec()), targetRatio(hoRatio, minHandoffsVsRedsync)),
			Pass:     hoRatio >= minHandoffsVsRedsync,
		},
		{
			ID:       "4",
			Target:   fmt.Sprintf("distinct names: operations/s ≥ %.1f× raw floor's", minDistinctVsFloor),
			Measured: fmt.Sprintf("%s vs %s: %s", formatRate(di[q].PerSec()), formatRate(di[fl].PerSec()), targetRatio(diRatio, minDistinctVsFloor)),
			Pass:     diRatio >= minDistinctVsFloor,
		},
		{
			ID:       "5",
			Target:   "allocations per lock+unlock ≤ redsync's",
			Measured: fmt.Sprintf("%.1f vs %.1f", al[q].AllocsPerOp, al[rs].AllocsPerOp),
			Pass:     al[q].AllocsPerOp <= al[rs].AllocsPerOp,
		},
		{
			ID:       "5b",
			Target:   "allocated bytes per lock+unlock ≤ redsync's",
			Measured: fmt.Sprintf("%s vs %s", formatBytes(al[q].BytesPerOp), formatBytes(al[rs].BytesPerOp)),
			Pass:     al[q].BytesPerOp <= al[rs].BytesPerOp,
		},
		{
			ID:       "safety",
			Target:   "contended: no overlap, every library (not a target: a check of the benchmark itself)",
			Measured: strings.Join(overlaps, ", "),
			Pass:     noOverlap,
		},
	}
}

// targetRatio formats a ratio checked against limit with two decimals, or
// three when two would round it onto the limit (0.798 is not "0.80×").
func targetRatio(r, limit float64) string {
	if s := fmt.Sprintf("%.2f", r); s == fmt.Sprintf("%.2f", limit) && r != limit {
		return fmt.Sprintf("%.3f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}
