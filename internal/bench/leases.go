package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
)

// leaseConfig is one run of scenario 9.
type leaseConfig struct {
	Leases int
	TTL    time.Duration
}

// leaseResult is one run of scenario 9 (quorumlock only: redsync has no
// automatic extension).
type leaseResult struct {
	leaseConfig
	Held          time.Duration
	Acquired      int // leases obtained
	AcquireFailed int
	AcquireTime   time.Duration
	Lost          int // leases whose Lost channel closed during the hold
	UnlockFailed  int
	// Goroutines of the whole process: before the leases, and the peak and
	// mean of the samples taken during the hold.
	GoroutinesBase, GoroutinesPeak int
	GoroutinesMean                 float64
	HeapPerLease                   float64 // bytes: live heap delta after acquisition / leases
	FirstFailure                   string  // the first failed acquisition
	FirstUnlock                    string  // the first failed Unlock
}

// leaseSample is how often the goroutines are counted during the hold.
const leaseSample = 100 * time.Millisecond

// leaseAcquirers is how many goroutines acquire and release the leases.
const leaseAcquirers = 64

// leasesScenario is scenario 9: for each config, one quorumlock Redlock on
// its own clients acquires cfg.Leases distinct names with WithAutoExtend and
// WithTTL(cfg.TTL), holds them all for s.leaseHold, counting goroutines, then
// counts the leases whose Lost closed and unlocks them all.
func leasesScenario(ctx context.Context, out io.Writer, addrs []string, s settings) ([]leaseResult, error) {
	var results []leaseResult
	for i, cfg := range s.leases {
		r, err := runLeases(ctx, addrs, cfg, s.leaseHold, i)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		fmt.Fprintf(out, "%-12s %-20s %d leases TTL %v held %v: %d acquired in %v (%d failed), %d lost, %d failed unlocks; goroutines base %d peak %d mean %.0f; %.0f B/lease%s\n",
			"leases", "quorumlock", cfg.Leases, cfg.TTL, r.Held.Round(time.Millisecond), r.Acquired, r.AcquireTime.Round(time.Millisecond),
			r.AcquireFailed, r.Lost, r.UnlockFailed, r.GoroutinesBase, r.GoroutinesPeak, r.GoroutinesMean, r.HeapPerLease, firstNote(r.FirstFailure))
		if r.FirstUnlock != "" {
			fmt.Fprintf(out, "%-12s %-20s first failed unlock: %s\n", "leases", "quorumlock", r.FirstUnlock)
		}
	}
	return results, nil
}

func runLeases(ctx context.Context, addrs []string, cfg leaseConfig, hold time.Duration, round int) (leaseResult, error) {
	lib, err := newLoadLib(loadQuorumlock, addrs)
	if err != nil {
		return leaseResult{}, err
	}
	defer lib.Close()
	if err := lib.warm(ctx, leaseAcquirers); err != nil {
		return leaseResult{}, err
	}
	res := leaseResult{leaseConfig: cfg}
	locks := make([]loadLock, cfg.Leases)
	lost := make([]<-chan struct{}, cfg.Leases)
	stamp := time.Now().UnixNano()
	for i := range locks {
		locks[i] = lib.newLock(fmt.Sprintf("bench:lease:%d:%d:%d", round, stamp, i), cfg.TTL, mutex.WithAutoExtend())
	}
	var heap0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap0)
	res.GoroutinesBase = runtime.NumGoroutine()

	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if res.FirstFailure == "" {
			res.FirstFailure = err.Error()
		}
	}
	ok := make([]bool, cfg.Leases)
	start := time.Now()
	each(cfg.Leases, func(i int) {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		if err := locks[i].TryLock(cctx); err != nil {
			fail(err)
			return
		}
		ok[i] = true
		lost[i] = locks[i].(quorumLoadLock).m.Lost()
	})
	res.AcquireTime = time.Since(start)
	var heap1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heap1)
	for _, o := range ok {
		if o {
			res.Acquired++
		}
	}
	res.AcquireFailed = cfg.Leases - res.Acquired
	if res.Acquired > 0 {
		res.HeapPerLease = (float64(heap1.HeapAlloc) - float64(heap0.HeapAlloc)) / float64(res.Acquired)
	}

	// Hold, counting goroutines; bounded by hold (or ctx).
	held := time.Now()
	tick := time.NewTicker(leaseSample)
	samples, sum := 0, 0
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			n := runtime.NumGoroutine()
			samples++
			sum += n
			res.GoroutinesPeak = max(res.GoroutinesPeak, n)
			done = time.Since(held) >= hold
		}
	}
	tick.Stop()
	res.Held = time.Since(held)
	if samples > 0 {
		res.GoroutinesMean = float64(sum) / float64(samples)
	}
	for i, o := range ok {
		if !o {
			continue
		}
		select {
		case <-lost[i]:
			res.Lost++
		default:
		}
	}
	var unlockFailed int
	each(cfg.Leases, func(i int) {
		if !ok[i] {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		if err := locks[i].Unlock(uctx); err != nil {
			mu.Lock()
			unlockFailed++
			if res.FirstUnlock == "" {
				res.FirstUnlock = err.Error()
			}
			mu.Unlock()
		}
	})
	res.UnlockFailed = unlockFailed
	return res, ctx.Err()
}

// each calls f(i) for every i below n, leaseAcquirers at a time, and
// returns once all calls have.
func each(n int, f func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range leaseAcquirers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// extendFloor measures the raw node throughput for renewals: pipelined
// token-checked PEXPIRE scripts (one per key, in batches of 1,000) on every
// node at once, keys keys per node, for about d. It returns the script calls
// per second summed over the nodes, the floor under any renewal scheme.
func extendFloor(ctx context.Context, addrs []string, keys int, d time.Duration) (float64, error) {
	lib, err := newLoadLib(loadRedsync, addrs) // clients only
	if err != nil {
		return 0, err
	}
	defer lib.Close()
	script := redis.NewScript(`if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('PEXPIRE',KEYS[1],ARGV[2]) end return 0`)
	const batch = 1000
	counts := make([]int, len(lib.clients))
	errs := make([]error, len(lib.clients))
	var wg sync.WaitGroup
	start := time.Now()
	for n, c := range lib.clients {
		wg.Go(func() {
			if errs[n] = script.Load(ctx, c).Err(); errs[n] != nil {
				return
			}
			set := c.Pipeline()
			for k := range keys {
				set.Set(ctx, fmt.Sprintf("bench:floor:%d", k), "token", time.Minute)
			}
			if _, errs[n] = set.Exec(ctx); errs[n] != nil {
				return
			}
			for i := 0; ctx.Err() == nil && time.Since(start) < d; i += batch {
				p := c.Pipeline()
				for k := range batch {
					script.EvalSha(ctx, p, []string{fmt.Sprintf("bench:floor:%d", (i+k)%keys)}, "token", 8000)
				}
				if _, errs[n] = p.Exec(ctx); errs[n] != nil {
					return
				}
				counts[n] += batch
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start) // includes the SETs: a slight underestimate
	total := 0
	for n := range counts {
		if errs[n] != nil {
			return 0, errs[n]
		}
		total += counts[n]
	}
	return float64(total) / elapsed.Seconds(), nil
}
