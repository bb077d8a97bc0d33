package main

import (
	"fmt"
	"io"
	"strings"
)

func printProcs(w io.Writer, lib string, r procsResult) {
	least, busiest, q := r.Fairness()
	fmt.Fprintf(w, "%-12s %-20s P%d×%d: hand-offs %s  wait p50 %s p99 %s  turns %d..%d (%.2f)  failed %d  overlaps %d  failed unlocks %d%s\n",
		"processes", lib, r.Procs, len(r.Turns)/max(1, r.Procs), formatRate(r.HandoffsPerSec()), formatMS(ms(r.Wait.P50)), formatMS(ms(r.Wait.P99)),
		least, busiest, q, r.Failed, r.Overlaps, r.UnlockFailed, firstNote(r.FirstFailure))
}

// loadMarkdown returns the tables of scenarios 6 to 9 for the generated
// part of docs/benchmarks.md.
func (r *report) loadMarkdown() string {
	var b strings.Builder
	s := r.Settings
	if len(r.Procs) == numLoadLibs {
		fmt.Fprintf(&b, "\n### 6. Contenders in separate processes\n\n%d workers in all, split over P contender processes (re-executions of the bench binary, each with its own clients and its own Redlock or redsync), all on one name; each worker: Lock (%v ctx) → hold %v → Unlock → pause %v; %v per library and P.\n\n",
			s.workers, s.lockTimeout, s.hold, s.pause, s.procsFor)
		b.WriteString("| P × workers | library | hand-offs/s | × redsync | wait p50 | wait p99 | turns least..busiest | least/busiest | failed Lock | failed Unlock | overlaps |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for i := range r.Procs[loadQuorumlock] {
			ref := r.Procs[loadRedsync][i].HandoffsPerSec()
			for lib := range numLoadLibs {
				p := r.Procs[lib][i]
				least, busiest, f := p.Fairness()
				x := ""
				if lib != loadRedsync && ref > 0 {
					x = ratio(p.HandoffsPerSec(), ref)
				}
				fmt.Fprintf(&b, "| %d × %d | %s | %s | %s | %s | %s | %d..%d | %.2f | %d | %d | %d |\n", p.Procs, s.workers/p.Procs, loadNames[lib],
					formatRate(p.HandoffsPerSec()), x, formatMS(ms(p.Wait.P50)), formatMS(ms(p.Wait.P99)), least, busiest, f, p.Failed, p.UnlockFailed, p.Overlaps)
			}
		}
	}
	if len(r.Waiters) == numLoadLibs {
		fmt.Fprintf(&b, "\n### 7. Independent waiters\n\n%d instances per library, each with its own clients (one Redlock or one redsync each), one waiter each, all calling Lock on one name at once (ctx %v); each holds %v, then unlocks.\n\n",
			s.waiters, s.waitersTimeout, s.hold)
		b.WriteString("| library | obtained | all obtained after | gave up / failed | failed Unlock |\n|---|---|---|---|---|\n")
		for lib, w := range r.Waiters {
			fmt.Fprintf(&b, "| %s | %d of %d | %s | %d | %d |\n", loadNames[lib], w.Obtained, w.Instances, formatMS(ms(w.AllIn)), w.Failed, w.Unlocks)
		}
	}
	if len(r.Bursts) == numLoadLibs {
		fmt.Fprintf(&b, "\n### 8. Bursts on distinct names\n\n%d TryLock calls per burst on distinct names, each instance new with its own clients and warm pools (as many PINGs in flight per node as calls); every success is unlocked at once.\n\n", s.burstCalls)
		b.WriteString("| at a time | TTL | library | obtained | failed: nodes unavailable | deadline | taken | other | failed Unlock | burst took |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for i := range r.Bursts[loadQuorumlock] {
			for lib := range numLoadLibs {
				x := r.Bursts[lib][i]
				fmt.Fprintf(&b, "| %d | %s | %s | %d of %d | %d | %d | %d | %d | %d | %s |\n", x.Concurrent, ttlName(x.TTL), loadNames[lib], x.Obtained, x.Calls,
					x.Kinds["nodes unavailable"], x.Kinds["deadline"], x.Kinds["taken"], x.Kinds[errBurstOther.Error()], x.UnlockFailed, formatMS(ms(x.Elapsed)))
			}
		}
	}
	if len(r.Leases) > 0 {
		fmt.Fprintf(&b, "\n### 9. Leases\n\nquorumlock only (redsync has no automatic extension): one Redlock with its own clients takes N distinct names with `WithAutoExtend()` and the TTL, %d at a time, holds all of them %v, then unlocks them. Goroutines are those of the whole bench process, counted every %v during the hold.\n\n",
			leaseAcquirers, s.leaseHold, leaseSample)
		b.WriteString("| leases | TTL | acquired | took | lost | failed Unlock | goroutines before | peak | mean | heap per lease |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, l := range r.Leases {
			fmt.Fprintf(&b, "| %d | %v | %d | %s | %d | %d | %d | %d | %.0f | %.0f B |\n", l.Leases, l.TTL, l.Acquired, formatMS(ms(l.AcquireTime)), l.Lost, l.UnlockFailed,
				l.GoroutinesBase, l.GoroutinesPeak, l.GoroutinesMean, l.HeapPerLease)
		}
		if r.RenewFloor > 0 {
			fmt.Fprintf(&b, "\nRaw node floor: the five nodes served **%s** pipelined token-checked PEXPIRE scripts (batches of 1,000, all nodes at once, 10,000 keys). For comparison, renewing every third of the TTL needs leases × 5 nodes × 3 / TTL calls per second: %s for 10,000 leases at TTL 2s.\n",
				formatRate(r.RenewFloor), formatRate(10000*5*3/2.0))
		}
	}
	return b.String()
}
