package main

import (
	"fmt"
	"io"
	"strings"
)

// primitiveTargets are the primitives scenario 10 holds to
// maxPrimitiveVsMutex, with their target's number; the write lock is
// reported, with no target.
var primitiveTargets = []struct {
	prim int
	id   string
}{{primPermit, "10a"}, {primRead, "10b"}, {primMulti, "10c"}}

// primitiveChecks evaluates the targets of those of scenarios 10 and 11 that
// ran.
func (r *report) primitiveChecks() []check {
	var cs []check
	if p := r.Primitives; len(p) > 0 {
		ref := ms(p[primMutex].P50)
		for _, t := range primitiveTargets {
			v := ms(p[t.prim].P50) / ref
			cs = append(cs, check{
				ID:       t.id,
				Target:   fmt.Sprintf("uncontended: %s acquire+release p50 ≤ %.1f× the Mutex's", primitiveNames[t.prim], maxPrimitiveVsMutex),
				Measured: fmt.Sprintf("%s vs %s: %s", formatMS(ms(p[t.prim].P50)), formatMS(ref), targetRatio(v, maxPrimitiveVsMutex)),
				Pass:     v <= maxPrimitiveVsMutex && p[t.prim].Errors.N == 0,
			})
		}
	}
	if m := r.Semaphore; m.Procs > 0 {
		cs = append(cs, check{
			ID:       "safe11",
			Target:   fmt.Sprintf("contended semaphore: never more than %d permits held at once (a check of the benchmark itself)", semaphoreLimit),
			Measured: fmt.Sprintf("at most %d at once", m.MostAtOnce),
			Pass:     m.MostAtOnce <= semaphoreLimit,
		})
	}
	return cs
}

func printSemaphore(w io.Writer, r procsResult) {
	least, busiest, q := r.Fairness()
	fmt.Fprintf(w, "%-12s %-20s P%d×%d, limit %d: permits %s  wait p50 %s p99 %s  turns %d..%d (%.2f)  failed %d  failed releases %d  at most %d held at once%s\n",
		"semaphore", "quorumlock", r.Procs, len(r.Turns)/max(1, r.Procs), semaphoreLimit, formatRate(r.HandoffsPerSec()),
		formatMS(ms(r.Wait.P50)), formatMS(ms(r.Wait.P99)), least, busiest, q, r.Failed, r.UnlockFailed, r.MostAtOnce, firstNote(r.FirstFailure))
}

// primitivesMarkdown returns the tables of scenarios 10 and 11 for the
// generated part of docs/benchmarks.md.
func (r *report) primitivesMarkdown() string {
	var b strings.Builder
	s := r.Settings
	if p := r.Primitives; len(p) > 0 {
		fmt.Fprintf(&b, "\n### 10. Primitives, uncontended\n\nquorumlock only: one Redlock with its own clients; %d sequential acquire+release per primitive, each on a name of its own, in turns of %d (a semaphore of limit %d, all its permits free; a multi-name lock on two names).\n\n",
			s.primitiveIterations, s.primitiveChunk, semaphoreLimit)
		b.WriteString("| primitive | acquire+release p50 | × mutex | p99 | × mutex | failed calls |\n|---|---|---|---|---|---|\n")
		for i, l := range p {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d |\n", primitiveNames[i], formatMS(ms(l.P50)), ratio(ms(l.P50), ms(p[primMutex].P50)),
				formatMS(ms(l.P99)), ratio(ms(l.P99), ms(p[primMutex].P99)), l.Errors.N)
		}
	}
	if m := r.Semaphore; m.Procs > 0 {
		least, busiest, f := m.Fairness()
		fmt.Fprintf(&b, "\n### 11. A contended semaphore\n\nquorumlock only: %d workers in %d contender processes (each with its own clients and Redlock) take permits of one semaphore of limit %d; each worker: AcquireContext (%v ctx) → hold %v → ReleaseContext → pause %v; %v.\n\n",
			s.workers, m.Procs, semaphoreLimit, s.lockTimeout, s.hold, s.pause, s.semaphoreFor)
		b.WriteString("| P × workers | permits/s | wait p50 | wait p99 | turns least..busiest | least/busiest | failed acquire | failed release | most held at once |\n|---|---|---|---|---|---|---|---|---|\n")
		fmt.Fprintf(&b, "| %d × %d | %s | %s | %s | %d..%d | %.2f | %d | %d | %d |\n", m.Procs, s.workers/m.Procs, formatRate(m.HandoffsPerSec()),
			formatMS(ms(m.Wait.P50)), formatMS(ms(m.Wait.P99)), least, busiest, f, m.Failed, m.UnlockFailed, m.MostAtOnce)
	}
	return b.String()
}
