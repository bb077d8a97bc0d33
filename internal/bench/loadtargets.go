package main

import (
	"fmt"
	"strings"
)

// The targets of scenarios 6 to 9 (issue 10, "What must be true").
const (
	minProcsVsRedsync   = 1.5 // 6: hand-offs/s at every P
	minProcsScaling     = 0.8 // 6: hand-offs/s at the most processes vs the fewest
	minProcsFairness    = 0.8 // 6: least/busiest worker turns
	maxWaitersVsRedsync = 2.0 // 7: time until all obtained
	maxGoroutineGrowth  = 1.5 // 9: peak goroutines, most leases vs fewest
)

// loadChecks evaluates the targets of those of scenarios 6 to 9 that ran.
func (r *report) loadChecks() []check {
	var cs []check
	s := r.Settings
	if len(r.Procs) == numLoadLibs {
		q, rs := r.Procs[loadQuorumlock], r.Procs[loadRedsync]
		every := func(id, target string, measure func(i int) (string, bool)) check {
			c := check{ID: id, Target: target, Pass: true}
			var parts []string
			for i := range q {
				m, ok := measure(i)
				parts = append(parts, fmt.Sprintf("P%d %s", q[i].Procs, m))
				c.Pass = c.Pass && ok
			}
			c.Measured = strings.Join(parts, ", ")
			return c
		}
		cs = append(cs,
			every("6a", fmt.Sprintf("processes: hand-offs/s ≥ %.1f× redsync's at every P", minProcsVsRedsync), func(i int) (string, bool) {
				v := q[i].HandoffsPerSec() / rs[i].HandoffsPerSec()
				return targetRatio(v, minProcsVsRedsync), v >= minProcsVsRedsync
			}),
			every("6c", fmt.Sprintf("processes: wait p99 ≤ %v at every P", maxWaitP99), func(i int) (string, bool) {
				return formatMS(ms(q[i].Wait.P99)), q[i].Wait.P99 <= maxWaitP99
			}),
			every("6d", fmt.Sprintf("processes: least/busiest worker turns ≥ %.1f at every P", minProcsFairness), func(i int) (string, bool) {
				_, _, f := q[i].Fairness()
				return fmt.Sprintf("%.2f", f), f >= minProcsFairness
			}),
			every("6e", "processes: no failed Lock call at every P", func(i int) (string, bool) {
				return fmt.Sprint(q[i].Failed), q[i].Failed == 0
			}),
			every("safe6", "processes: no overlap, both libraries (a check of the benchmark itself)", func(i int) (string, bool) {
				return fmt.Sprintf("%d/%d", q[i].Overlaps, rs[i].Overlaps), q[i].Overlaps == 0 && rs[i].Overlaps == 0
			}),
		)
		if n := len(q); n > 1 {
			v := q[n-1].HandoffsPerSec() / q[0].HandoffsPerSec()
			cs = append(cs, check{
				ID:       "6b",
				Target:   fmt.Sprintf("processes: hand-offs/s at P%d ≥ %.1f× its own at P%d", q[n-1].Procs, minProcsScaling, q[0].Procs),
				Measured: fmt.Sprintf("%s vs %s: %s", formatRate(q[n-1].HandoffsPerSec()), formatRate(q[0].HandoffsPerSec()), targetRatio(v, minProcsScaling)),
				Pass:     v >= minProcsScaling,
			})
		}
	}
	if len(r.Waiters) == numLoadLibs {
		q, rs := r.Waiters[loadQuorumlock], r.Waiters[loadRedsync]
		v := q.AllIn.Seconds() / rs.AllIn.Seconds()
		cs = append(cs,
			check{
				ID:       "7a",
				Target:   fmt.Sprintf("%d independent waiters: all obtained within %.0f× redsync's time", s.waiters, maxWaitersVsRedsync),
				Measured: fmt.Sprintf("%s vs %s: %s", formatMS(ms(q.AllIn)), formatMS(ms(rs.AllIn)), targetRatio(v, maxWaitersVsRedsync)),
				Pass:     q.Failed == 0 && v <= maxWaitersVsRedsync,
			},
			check{
				ID:       "7b",
				Target:   fmt.Sprintf("%d independent waiters: none starves (gives up at %v)", s.waiters, s.waitersTimeout),
				Measured: fmt.Sprintf("%d of %d obtained", q.Obtained, q.Instances),
				Pass:     q.Failed == 0,
			})
	}
	if len(r.Bursts) == numLoadLibs {
		q := r.Bursts[loadQuorumlock]
		burst := func(id, target string, count func(b burstResult) int) check {
			c := check{ID: id, Target: target, Pass: true}
			var parts []string
			for _, b := range q {
				n := count(b)
				parts = append(parts, fmt.Sprintf("%d at a time, TTL %v: %d", b.Concurrent, ttlName(b.TTL), n))
				c.Pass = c.Pass && n == 0
			}
			c.Measured = strings.Join(parts, "; ")
			return c
		}
		cs = append(cs,
			burst("8a", fmt.Sprintf("burst of %d TryLock on distinct names: no ErrNodesUnavailable", s.burstCalls),
				func(b burstResult) int { return b.Kinds["nodes unavailable"] }),
			burst("8b", "burst: no failed TryLock (as redsync)", func(b burstResult) int { return b.Failed() }),
			burst("8c", "burst: no failed Unlock", func(b burstResult) int { return b.UnlockFailed }),
		)
	}
	if len(r.Leases) > 0 {
		c := check{ID: "9a", Target: fmt.Sprintf("leases held %v with WithAutoExtend: none lost, none failed to be acquired", s.leaseHold), Pass: true}
		var parts []string
		for _, l := range r.Leases {
			parts = append(parts, fmt.Sprintf("%d@%v: %d lost, %d not acquired", l.Leases, l.TTL, l.Lost, l.AcquireFailed))
			c.Pass = c.Pass && l.Lost == 0 && l.AcquireFailed == 0
		}
		c.Measured = strings.Join(parts, ", ")
		u := check{ID: "9c", Target: "leases: no failed Unlock (not in the issue's list; a failure users would see)", Pass: true}
		parts = nil
		for _, l := range r.Leases {
			parts = append(parts, fmt.Sprintf("%d@%v: %d", l.Leases, l.TTL, l.UnlockFailed))
			u.Pass = u.Pass && l.UnlockFailed == 0
		}
		u.Measured = strings.Join(parts, ", ")
		cs = append(cs, c, u)
		if g, ok := goroutineGrowth(r.Leases); ok {
			cs = append(cs, g)
		}
	}
	return cs
}

// goroutineGrowth compares, per TTL, the peak goroutines with the most
// leases to that with the fewest; ok is false if no TTL ran two counts.
func goroutineGrowth(ls []leaseResult) (check, bool) {
	c := check{ID: "9b", Target: fmt.Sprintf("leases: peak goroutines at the most leases ≤ %.1f× at the fewest, per TTL", maxGoroutineGrowth), Pass: true}
	var parts []string
	seen := map[string]bool{}
	for _, a := range ls {
		key := a.TTL.String()
		if seen[key] {
			continue
		}
		seen[key] = true
		lo, hi := a, a
		for _, b := range ls {
			if b.TTL == a.TTL && b.Leases < lo.Leases {
				lo = b
			}
			if b.TTL == a.TTL && b.Leases > hi.Leases {
				hi = b
			}
		}
		if lo.Leases == hi.Leases {
			continue
		}
		v := float64(hi.GoroutinesPeak) / float64(max(1, lo.GoroutinesPeak))
		parts = append(parts, fmt.Sprintf("TTL %v: %d vs %d, %s", a.TTL, hi.GoroutinesPeak, lo.GoroutinesPeak, targetRatio(v, maxGoroutineGrowth)))
		c.Pass = c.Pass && v <= maxGoroutineGrowth
	}
	c.Measured = strings.Join(parts, "; ")
	return c, len(parts) > 0
}
