package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// settings are the sizes and durations of one run; see the flags in main.go.
type settings struct {
	iterations     int           // uncontended lock+unlock per library
	chunk          int           // uncontended iterations per library per turn
	slowIterations int           // locks per library with one node slowed
	slowChunk      int           // of those, per library per turn
	slowDelay      time.Duration // latency added to node 0's replies
	workers        int           // contending workers per library
	contendedFor   time.Duration // one contended run of one library
	hold, pause    time.Duration // contended: time held, time between Unlock and the next Lock
	lockTimeout    time.Duration // contended: ctx of each Lock
	distinctGoes   int           // goroutines on distinct names per library
	distinctFor    time.Duration // distinct names: total per library, over all its turns
	distinctTurn   time.Duration // distinct names: longest turn of one library
	rounds         int           // turns of each library in the contended and alloc scenarios

	run            scenarioSet   // which scenarios run
	procCounts     []int         // scenario 6: numbers of processes
	procsFor       time.Duration // scenario 6: one run of one library at one count
	waiters        int           // scenario 7: independent instances, one waiter each
	waitersTimeout time.Duration // scenario 7: ctx of each waiter's Lock
	burstCalls     int           // scenario 8: TryLock calls per burst
	bursts         []burstConfig // scenario 8
	leases         []leaseConfig // scenario 9
	leaseHold      time.Duration // scenario 9: how long all leases are held
	floorFor       time.Duration // scenario 9: the raw renewal floor's measurement

	primitiveIterations int           // scenario 10: acquire+release per primitive
	primitiveChunk      int           // scenario 10: of those, per primitive per turn
	semaphoreFor        time.Duration // scenario 11: the contended semaphore's run
	firstLocks          int           // scenario 12: first locks of a new instance per library
}

// command returns the command line that runs s: the flags that differ from
// the defaults, after `go run .`.
func (s settings) command() string {
	d := defaultSettings()
	cmd := "cd internal/bench && go run ."
	if s.iterations != d.iterations {
		cmd += fmt.Sprintf(" -iterations %d", s.iterations)
	}
	if s.slowIterations != d.slowIterations {
		cmd += fmt.Sprintf(" -slow-iterations %d", s.slowIterations)
	}
	if s.contendedFor != d.contendedFor {
		cmd += fmt.Sprintf(" -contended %v", s.contendedFor)
	}
	if s.distinctFor != d.distinctFor {
		cmd += fmt.Sprintf(" -distinct %v", s.distinctFor)
	}
	if s.rounds != d.rounds {
		cmd += fmt.Sprintf(" -rounds %d", s.rounds)
	}
	if s.run != d.run {
		cmd += " -scenarios " + s.run.String()
	}
	if !slices.Equal(s.procCounts, d.procCounts) {
		cmd += " -procs " + joinInts(s.procCounts)
	}
	if s.procsFor != d.procsFor {
		cmd += fmt.Sprintf(" -procs-for %v", s.procsFor)
	}
	if s.waiters != d.waiters {
		cmd += fmt.Sprintf(" -waiters %d", s.waiters)
	}
	if s.waitersTimeout != d.waitersTimeout {
		cmd += fmt.Sprintf(" -waiters-timeout %v", s.waitersTimeout)
	}
	if s.burstCalls != d.burstCalls {
		cmd += fmt.Sprintf(" -burst-calls %d", s.burstCalls)
	}
	if !slices.Equal(s.leases, d.leases) {
		cmd += " -leases " + leaseCounts(s.leases) + " -lease-ttls " + leaseTTLs(s.leases)
	}
	if s.leaseHold != d.leaseHold {
		cmd += fmt.Sprintf(" -lease-hold %v", s.leaseHold)
	}
	if s.primitiveIterations != d.primitiveIterations {
		cmd += fmt.Sprintf(" -primitive-iterations %d", s.primitiveIterations)
	}
	if s.semaphoreFor != d.semaphoreFor {
		cmd += fmt.Sprintf(" -semaphore-for %v", s.semaphoreFor)
	}
	if s.firstLocks != d.firstLocks {
		cmd += fmt.Sprintf(" -first-locks %d", s.firstLocks)
	}
	return cmd
}

// plural returns "n word" or "n words".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// defaultSettings are the sizes of a full run, about two minutes on two
// cores; the flags change the first few.
func defaultSettings() settings {
	return settings{
		iterations:     2000,
		chunk:          100,
		slowIterations: 200,
		slowChunk:      20,
		slowDelay:      50 * time.Millisecond,
		workers:        16,
		contendedFor:   5 * time.Second,
		hold:           time.Millisecond,
		pause:          time.Millisecond,
		lockTimeout:    5 * time.Second,
		distinctGoes:   64,
		distinctFor:    3 * time.Second,
		distinctTurn:   500 * time.Millisecond,
		rounds:         2,
		run:            allScenarios,
		procCounts:     []int{1, 2, 4, 8},
		procsFor:       3 * time.Second,
		waiters:        100,
		waitersTimeout: 30 * time.Second,
		burstCalls:     1000,
		bursts: []burstConfig{{Concurrent: 256}, {Concurrent: 64, TTL: 2 * time.Second}, {Concurrent: 1000, TTL: 2 * time.Second},
			{Concurrent: 1000, TTL: 500 * time.Millisecond}},
		leases:    makeLeases([]int{1000, 10000}, []time.Duration{2 * time.Second, 8 * time.Second}),
		leaseHold: 10 * time.Second,
		floorFor:  2 * time.Second,

		primitiveIterations: 1000,
		primitiveChunk:      100,
		semaphoreFor:        3 * time.Second,
		firstLocks:          300,
	}
}

// check rejects settings that would measure nothing.
func (s settings) check() error {
	switch {
	case s.iterations < 1 || s.slowIterations < 1 || s.primitiveIterations < 1 || s.firstLocks < 1:
		return errors.New("-iterations, -slow-iterations, -primitive-iterations and -first-locks must be at least 1")
	case s.rounds < 1:
		return errors.New("-rounds must be at least 1")
	case s.contendedFor <= 0 || s.distinctFor <= 0:
		return errors.New("-contended and -distinct must be positive")
	case s.run == 0:
		return errors.New("-scenarios: choose at least one of 1 to 12")
	case s.procsFor <= 0 || s.waitersTimeout <= 0 || s.leaseHold <= 0 || s.semaphoreFor <= 0:
		return errors.New("-procs-for, -waiters-timeout, -lease-hold and -semaphore-for must be positive")
	case s.waiters < 1 || s.burstCalls < 1:
		return errors.New("-waiters and -burst-calls must be at least 1")
	}
	for _, p := range s.procCounts {
		if p < 1 || s.workers%p != 0 {
			return fmt.Errorf("-procs: %d does not divide the %d workers", p, s.workers)
		}
	}
	for _, l := range s.leases {
		if l.Leases < 1 || l.TTL < 100*time.Millisecond {
			return errors.New("-leases must be at least 1 and -lease-ttls at least 100ms")
		}
	}
	return nil
}

const (
	// opTimeout bounds every Lock and Unlock outside the contended
	// scenario, so that no loop can hang on a broken node.
	opTimeout = 10 * time.Second

	// warmOps is the number of untimed lock+unlock each locker makes before
	// it is measured: connections are dialed and scripts loaded then.
	warmOps = 20

	// failurePause is how long a loop waits after a failed call before the
	// next, so that a failure that repeats at once cannot spin.
	failurePause = 10 * time.Millisecond
)

// slot is the lock object a loop uses for one name, replaced by a new one
// after a failed Unlock: the old one may still hold its acquisition (a
// quorumlock Mutex then refuses to Lock again until an Unlock succeeds), and
// whatever it left on the nodes is released by its commands still in flight
// or expires with the TTL. Not safe for concurrent use.
type slot struct {
	mk   lockMaker
	name string
	l    locker
}

func newSlot(mk lockMaker, name string) *slot { return &slot{mk: mk, name: name, l: mk(name)} }

// recover handles err, the failure of a call on the slot: it replaces the
// lock object if Unlock failed, then pauses failurePause (less if ctx ends).
func (s *slot) recover(ctx context.Context, err error) {
	if _, ok := errors.AsType[*unlockError](err); ok {
		s.l = s.mk(s.name)
	}
	t := time.NewTimer(failurePause)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// unlockError is a failed Unlock, told apart from a failed Lock.
type unlockError struct{ err error }

func (e *unlockError) Error() string { return "unlock: " + e.err.Error() }
func (e *unlockError) Unwrap() error { return e.err }

// order returns the order in which n libraries take their turn in round r:
// forward in even rounds, backward in odd ones (A,B,C,D then D,C,B,A), so that
// a machine that speeds up or slows down during a scenario favours none.
func order(n, r int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if r%2 == 1 {
		slices.Reverse(idx)
	}
	return idx
}

// failures counts failed calls and keeps the first error, for the report.
type failures struct {
	N     int
	First error
}

func (f *failures) add(err error) {
	if f.First == nil {
		f.First = err
	}
	f.N++
}

func (f *failures) merge(g failures) {
	if f.First == nil {
		f.First = g.First
	}
	f.N += g.N
}

// latencyResult is the outcome of a sequential scenario for one library.
type latencyResult struct {
	percentiles
	Errors failures
}

// measure is one timed operation of a sequential scenario, on the slot's
// lock object.
type measure func(ctx context.Context, s *slot) (time.Duration, error)

// onSlot returns m on the slot's lock object.
func onSlot(m func(ctx context.Context, l locker) (time.Duration, error)) measure {
	return func(ctx context.Context, s *slot) (time.Duration, error) { return m(ctx, s.l) }
}

// newLockUnlock times the making of a new lock object on the slot's name
// (rs.NewMutex(name) for quorumlock), then Lock and Unlock on it, as a user
// who makes a Mutex per critical section does. A failed Unlock is reported
// as an *unlockError; the slot keeps its own lock object.
func newLockUnlock(ctx context.Context, s *slot) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	start := time.Now()
	l := s.mk(s.name)
	if err := l.Lock(ctx); err != nil {
		return 0, err
	}
	if err := l.Unlock(ctx); err != nil {
		return 0, &unlockError{err}
	}
	return time.Since(start), nil
}

// lockUnlock times Lock followed by Unlock. A failed Unlock is reported as
// an *unlockError.
func lockUnlock(ctx context.Context, l locker) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	start := time.Now()
	if err := l.Lock(ctx); err != nil {
		return 0, err
	}
	if err := l.Unlock(ctx); err != nil {
		return 0, &unlockError{err}
	}
	return time.Since(start), nil
}

// lockOnly times Lock; the Unlock that follows is not timed. A failed Unlock
// is reported as an *unlockError.
func lockOnly(ctx context.Context, l locker) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	start := time.Now()
	if err := l.Lock(ctx); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if err := l.Unlock(ctx); err != nil {
		return 0, &unlockError{err}
	}
	return d, nil
}

// sequential runs iterations of m per library, one library at a time, in
// turns of chunk iterations interleaved by order, each library on its own
// lock name (prefix + library), after warmOps untimed ones. It returns one
// result per library, or ctx's error if ctx ended first.
func sequential(ctx context.Context, libs []*library, slowed bool, prefix string, iterations, chunk int, m measure) ([]latencyResult, error) {
	slots := make([]*slot, len(libs))
	for i, lib := range libs {
		mk := lib.direct
		if slowed {
			mk = lib.slowed
		}
		slots[i] = newSlot(mk, prefix+lib.name)
		for range warmOps {
			if _, err := lockUnlock(ctx, slots[i].l); err != nil && ctx.Err() == nil {
				return nil, fmt.Errorf("%s: warm-up: %w", lib.name, err)
			}
		}
	}
	samples := make([][]time.Duration, len(libs))
	results := make([]latencyResult, len(libs))
	for r := 0; r*chunk < iterations; r++ {
		for _, i := range order(len(libs), r) {
			for range min(chunk, iterations-r*chunk) {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				d, err := m(ctx, slots[i])
				if err != nil {
					results[i].Errors.add(err)
					slots[i].recover(ctx, err)
					continue
				}
				samples[i] = append(samples[i], d)
			}
		}
	}
	for i := range results {
		results[i].percentiles = summarize(samples[i])
	}
	return results, nil
}

// uncontended is scenario 1: lock+unlock, sequential, on one name per library.
func uncontended(ctx context.Context, libs []*library, s settings) ([]latencyResult, error) {
	return sequential(ctx, libs, false, "bench:uncontended:", s.iterations, s.chunk, onSlot(lockUnlock))
}

// uncontendedNew is scenario 1's second run: as uncontended, but every
// lock+unlock on a new lock object, whose making is timed too.
func uncontendedNew(ctx context.Context, libs []*library, s settings) ([]latencyResult, error) {
	return sequential(ctx, libs, false, "bench:uncontended-new:", s.iterations, s.chunk, newLockUnlock)
}

// slowNodeLock is scenario 2: Lock alone, sequential, with node 0 slowed.
func slowNodeLock(ctx context.Context, libs []*library, s settings) ([]latencyResult, error) {
	return sequential(ctx, libs, true, "bench:slow-node:", s.slowIterations, s.slowChunk, onSlot(lockOnly))
}

// contendedResult is the outcome of scenario 3 for one library, over all its
// rounds.
type contendedResult struct {
	Name         string        // the library as it ran (the raw floor polls)
	Elapsed      time.Duration // sum of the rounds' wall times
	Acquisitions int
	Failed       failures // Lock calls that failed before their round ended
	UnlockFailed failures
	Overlaps     int64 // acquisitions that found another worker in the critical section
	Gap, Wait    percentiles
	Turns        []int // acquisitions per worker
}

// HandoffsPerSec is successful acquisitions per second of wall time.
func (c *contendedResult) HandoffsPerSec() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(c.Acquisitions) / c.Elapsed.Seconds()
}

// Fairness returns the turns of the least and of the busiest worker and
// their ratio (1 when every worker had as many turns, 0 when one had none).
func (c *contendedResult) Fairness() (least, busiest int, ratio float64) {
	if len(c.Turns) == 0 {
		return 0, 0, 0
	}
	least, busiest = slices.Min(c.Turns), slices.Max(c.Turns)
	if busiest == 0 {
		return least, busiest, 0
	}
	return least, busiest, float64(least) / float64(busiest)
}

// acquisition is one turn of a contended worker.
type acquisition struct {
	acquired  time.Time     // Lock returned
	unlocking time.Time     // Unlock called: the end of the critical section
	released  time.Time     // Unlock returned
	wait      time.Duration // Lock call to Lock return
}

// workerLog is what one contended worker saw in one round.
type workerLog struct {
	turns        []acquisition
	failed       failures
	unlockFailed failures
}

// contended is scenario 3: s.workers workers per library contend for one name,
// each with its own lock object, in s.rounds runs of s.contendedFor per
// library, interleaved by order. Every round uses fresh names, so that keys a
// library may leave behind when a round ends cannot block the next one.
func contended(ctx context.Context, libs []*library, s settings) ([]contendedResult, error) {
	results := make([]contendedResult, len(libs))
	gaps := make([][]time.Duration, len(libs))
	waits := make([][]time.Duration, len(libs))
	for i, lib := range libs {
		results[i].Name, _ = lib.contender()
		results[i].Turns = make([]int, s.workers)
	}
	for r := range s.rounds {
		for _, i := range order(len(libs), r) {
			name, mk := libs[i].contender()
			slots := make([]*slot, s.workers)
			for w := range slots {
				slots[w] = newSlot(mk, fmt.Sprintf("bench:contended:%s:round%d", name, r))
			}
			logs, overlaps, elapsed, err := contendRound(ctx, slots, s)
			if err != nil {
				return nil, err
			}
			res := &results[i]
			res.Elapsed += elapsed
			res.Overlaps += overlaps
			var all []acquisition
			for w, log := range logs {
				res.Turns[w] += len(log.turns)
				res.Failed.merge(log.failed)
				res.UnlockFailed.merge(log.unlockFailed)
				all = append(all, log.turns...)
			}
			res.Acquisitions += len(all)
			gaps[i] = append(gaps[i], idleGaps(all)...)
			for _, a := range all {
				waits[i] = append(waits[i], a.wait)
			}
		}
	}
	for i := range results {
		results[i].Gap = summarize(gaps[i])
		results[i].Wait = summarize(waits[i])
	}
	return results, nil
}

// contendRound runs one worker per slot for s.contendedFor, all on the same
// name. Each worker loops: Lock (ctx of s.lockTimeout) → hold s.hold →
// Unlock → pause s.pause, until the round's deadline; a Lock still waiting
// then is cancelled and not counted as failed. After a failure the worker
// recovers its slot (see slot.recover). An atomic counter of workers inside
// the critical section detects overlaps. It returns each worker's log, the
// overlaps and the round's wall time, once every worker has returned; or
// ctx's error.
func contendRound(ctx context.Context, slots []*slot, s settings) ([]workerLog, int64, time.Duration, error) {
	start := time.Now()
	run, cancel := context.WithDeadline(ctx, start.Add(s.contendedFor))
	defer cancel()
	var inside, overlaps atomic.Int64
	logs := make([]workerLog, len(slots))
	var wg sync.WaitGroup
	for w, sl := range slots {
		log := &logs[w]
		wg.Go(func() {
			for run.Err() == nil {
				lockCtx, cancelLock := context.WithTimeout(run, s.lockTimeout)
				called := time.Now()
				err := sl.l.Lock(lockCtx)
				acquired := time.Now()
				cancelLock()
				if err != nil {
					if run.Err() == nil {
						log.failed.add(err)
						sl.recover(run, err)
					}
					continue
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(s.hold)
				inside.Add(-1) // before Unlock: the next owner may enter once it is sent
				unlocking := time.Now()
				unlockCtx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), s.lockTimeout)
				err = sl.l.Unlock(unlockCtx)
				cancelUnlock()
				log.turns = append(log.turns, acquisition{acquired: acquired, unlocking: unlocking, released: time.Now(), wait: acquired.Sub(called)})
				if err != nil {
					log.unlockFailed.add(err)
					sl.recover(run, &unlockError{err})
				}
				time.Sleep(s.pause)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, 0, 0, err
	}
	return logs, overlaps.Load(), elapsed, nil
}

// idleGaps returns, for the acquisitions of one round, the time between each
// release and the acquisition that followed it: acquisitions are taken in
// the order their Lock returned, and a gap is counted only when the next
// acquisition came after the previous Unlock returned (a library may grant
// the next owner before the releasing Unlock has returned).
func idleGaps(all []acquisition) []time.Duration {
	slices.SortFunc(all, func(a, b acquisition) int { return a.acquired.Compare(b.acquired) })
	var gaps []time.Duration
	for i := 1; i < len(all); i++ {
		if prev := all[i-1].released; all[i].acquired.After(prev) {
			gaps = append(gaps, all[i].acquired.Sub(prev))
		}
	}
	return gaps
}

// throughputResult is the outcome of scenario 4 for one library.
type throughputResult struct {
	Ops     int
	Elapsed time.Duration
	Errors  failures
}

// PerSec is completed lock+unlock per second of wall time.
func (t *throughputResult) PerSec() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Ops) / t.Elapsed.Seconds()
}

// distinct is scenario 4: s.distinctGoes goroutines per library, each on a
// name of its own, lock+unlock in a loop; s.distinctFor per library, split
// into turns of at most s.distinctTurn interleaved by order. Short turns
// spread a burst of outside load on the machine over every library.
func distinct(ctx context.Context, libs []*library, s settings) ([]throughputResult, error) {
	slots := make([][]*slot, len(libs))
	for i, lib := range libs {
		slots[i] = make([]*slot, s.distinctGoes)
		for g := range slots[i] {
			slots[i][g] = newSlot(lib.direct, fmt.Sprintf("bench:distinct:%s:%d", lib.name, g))
		}
	}
	results := make([]throughputResult, len(libs))
	turns := max(1, int((s.distinctFor+s.distinctTurn-1)/s.distinctTurn))
	turn := s.distinctFor / time.Duration(turns)
	for r := range turns {
		for _, i := range order(len(libs), r) {
			ops, errs, elapsed := throughputRound(ctx, slots[i], turn)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			results[i].Ops += ops
			results[i].Errors.merge(errs)
			results[i].Elapsed += elapsed
		}
	}
	return results, nil
}

// throughputRound runs one goroutine per slot doing lock+unlock until d has
// passed, and returns the completed operations, the failures and the wall
// time until the last goroutine returned. After a failure a goroutine
// recovers its slot (see slot.recover).
func throughputRound(ctx context.Context, slots []*slot, d time.Duration) (int, failures, time.Duration) {
	start := time.Now()
	deadline := start.Add(d)
	counts := make([]int, len(slots))
	errs := make([]failures, len(slots))
	var wg sync.WaitGroup
	for g, sl := range slots {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if _, err := lockUnlock(ctx, sl.l); err != nil {
					errs[g].add(err)
					sl.recover(ctx, err)
					continue
				}
				counts[g]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var total failures
	for _, e := range errs {
		total.merge(e)
	}
	var ops int
	for _, c := range counts {
		ops += c
	}
	return ops, total, elapsed
}

// allocResult is the outcome of scenario 5 for one library: the means over
// its rounds of testing.Benchmark's figures.
type allocResult struct {
	NsPerOp, AllocsPerOp, BytesPerOp float64
}

// allocTries bounds the runs of testing.Benchmark for one library and round:
// a run stops at the first failed call (a node that did not answer within the
// library's timeout on a loaded machine), and is then made again.
const allocTries = 3

// allocations is scenario 5: testing.Benchmark of benchLockUnlock, with
// b.ReportAllocs, for every library in s.rounds interleaved turns. A run that
// failed is made again, at most allocTries times; each retry is reported on
// out.
func allocations(ctx context.Context, out io.Writer, libs []*library, s settings) ([]allocResult, error) {
	slots := make([]*slot, len(libs))
	for i, lib := range libs {
		slots[i] = newSlot(lib.direct, "bench:allocs:"+lib.name)
	}
	results := make([]allocResult, len(libs))
	for r := range s.rounds {
		for _, i := range order(len(libs), r) {
			var br testing.BenchmarkResult
			for try := 1; ; try++ {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				var failed error
				br = testing.Benchmark(benchLockUnlock(ctx, slots[i].l, &failed))
				if failed == nil {
					break
				}
				slots[i].recover(ctx, failed)
				if try == allocTries {
					return nil, fmt.Errorf("%s: %d benchmark runs failed, the last with: %w", libs[i].name, try, failed)
				}
				fmt.Fprintf(out, "allocs       %-20s run %d failed, made again: %v\n", libs[i].name, try, failed)
			}
			n := float64(s.rounds)
			results[i].NsPerOp += float64(br.T.Nanoseconds()) / float64(br.N) / n
			results[i].AllocsPerOp += float64(br.MemAllocs) / float64(br.N) / n
			results[i].BytesPerOp += float64(br.MemBytes) / float64(br.N) / n
		}
	}
	return results, nil
}

// benchLockUnlock is the benchmark of one uncontended lock+unlock on l, used
// by the program (through testing.Benchmark) and by BenchmarkLockUnlock. The
// calls share one ctx whose deadline bounds the whole benchmark, so that
// no per-call context adds its own allocations to the figures. A failed call
// stops the benchmark with b.Fatal, after storing the error in *failed when
// failed is not nil.
func benchLockUnlock(ctx context.Context, l locker, failed *error) func(b *testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		fail := func(err error) {
			if failed != nil {
				*failed = err
			}
			b.Fatal(err)
		}
		for range warmOps {
			if err := lockUnlockOnce(ctx, l); err != nil {
				fail(err)
			}
		}
		for b.Loop() {
			if err := lockUnlockOnce(ctx, l); err != nil {
				fail(err)
			}
		}
	}
}

// lockUnlockOnce is Lock then Unlock; a failed Unlock is reported as an
// *unlockError.
func lockUnlockOnce(ctx context.Context, l locker) error {
	if err := l.Lock(ctx); err != nil {
		return err
	}
	if err := l.Unlock(ctx); err != nil {
		return &unlockError{err}
	}
	return nil
}

// benchNewLockUnlock is benchLockUnlock with a new lock object on name,
// made by mk, for every lock+unlock.
func benchNewLockUnlock(ctx context.Context, mk lockMaker, name string) func(b *testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for range warmOps {
			if err := lockUnlockOnce(ctx, mk(name)); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			if err := lockUnlockOnce(ctx, mk(name)); err != nil {
				b.Fatal(err)
			}
		}
	}
}
