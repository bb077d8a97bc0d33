package timing

import (
	"math/bits"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// sched tells whether this process has lately been slow to run its own
// goroutines, from runtime/metrics' /sched/latencies (how long runnable
// goroutines waited for a thread), read when asked: a node's silence over a
// time when the process left goroutines waiting may be the process's, its
// reader of the node's answers among them (docs/design.md, "Per-node
// timeout").
var sched struct {
	mu     sync.Mutex
	sample [2]metrics.Sample
	counts []uint64 // at the latest read
	// The waits reads found, one per size (waits[k]: w of bits.Len(w in
	// µs) = k, the one reaching furthest), so that a burst's many short
	// waits do not push a long one out: a wait of w found at t kept
	// goroutines from running over [t-w, t], and the process is taken as
	// slow for w more.
	waits [40]struct {
		at time.Time
		w  time.Duration
	}
}

// Excuses bounds the timeouts of d added to a node's for this process's own
// delays (WaitedToRun): as many as make 5s, at least 8. A node silent for
// that many more is judged as if the process had run promptly, so that no
// call waits forever on a hung node while the process stays busy.
func Excuses(d time.Duration) int {
	if d <= 0 {
		return 8
	}
	return max(8, int(5*time.Second/d))
}

// WaitedToRun reports whether, since the given time on the real clock, a
// goroutine of this process waited at least d to run, as far as the
// runtime's samples tell (a sample is taken when the wait ends, and a wait
// found is assumed to go on for as long again), or goroutines wait to run
// now, 16 for each thread that runs them (a burst, before its waits are
// sampled). Safe for concurrent use.
func WaitedToRun(since time.Time, d time.Duration) bool { return waitedToRun(since, d, true) }

// WaitedToRunSampled is WaitedToRun by the runtime's samples alone, not the
// goroutines waiting now: for a verdict on a stretch that ends now, which the
// process's own wake-ups of the moment (a loss closing many Lost) must not sway.
func WaitedToRunSampled(since time.Time, d time.Duration) bool { return waitedToRun(since, d, false) }

func waitedToRun(since time.Time, d time.Duration, runnable bool) bool {
	s := &sched
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sample[0].Name, s.sample[1].Name = "/sched/latencies:seconds", "/sched/goroutines/runnable:goroutines"
	metrics.Read(s.sample[:])
	if v := s.sample[1].Value; runnable && v.Kind() == metrics.KindUint64 && v.Uint64() >= 16*uint64(runtime.GOMAXPROCS(0)) {
		return true
	}
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return false
	}
	now, h := time.Now(), s.sample[0].Value.Float64Histogram()
	if len(s.counts) == len(h.Counts) {
		for i := len(h.Counts) - 1; i > 0; i-- {
			if h.Counts[i] > s.counts[i] {
				w := time.Duration(h.Buckets[i] * float64(time.Second))
				if e := &s.waits[min(bits.Len64(uint64(max(w, 0)/time.Microsecond)), len(s.waits)-1)]; now.Add(w).After(e.at.Add(e.w)) {
					e.at, e.w = now, w
				}
				break
			}
		}
	}
	s.counts = append(s.counts[:0], h.Counts...)
	for _, w := range s.waits {
		if w.w >= d && w.at.Add(w.w).After(since) {
			return true
		}
	}
	return false
}
