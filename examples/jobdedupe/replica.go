package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// replica is one instance of the service. It has its own connections to the
// lock nodes, as a separate process would, and shares nothing with the other
// replicas but the nodes.
type replica struct {
	id int
	rs *redlock.Redlock
}

// job is the scheduled work. Its ctx is cancelled, with a cause matching
// mutex.ErrLost, if the lock is lost while it runs: it must stop then, since
// another replica may start it.
type job func(ctx context.Context) error

// result is what one replica did on one tick.
type result struct {
	Replica int
	Ran     bool          // it got the lock and ran the job
	Took    time.Duration // how long the job ran, under the lock
	// Err is nil when the job ran and ended well; when it did not run, the
	// acquisition error (matching mutex.ErrNotObtained); when it ran, the
	// job's error, joined with the loss (matching mutex.ErrLost) if the lock
	// was lost meanwhile.
	Err error
}

// Skipped reports whether the replica left the tick to another one: the lock
// was held by someone else, not out of reach for want of nodes.
func (r result) Skipped() bool {
	return !r.Ran && errors.Is(r.Err, mutex.ErrContended)
}

// jobName is the lock that runs tick's job: one per tick, so that the job runs
// once per tick, and a replica stuck on an old tick cannot block a new one.
func jobName(tick int) string { return fmt.Sprintf("job:nightly-report:%d", tick) }

// runTick fires tick on every replica at the same moment, as a cron entry
// firing on each of them does, and returns what each did, in replica order.
func runTick(ctx context.Context, replicas []*replica, tick int, ttl time.Duration, work job) []result {
	results := make([]result, len(replicas))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Go(func() {
			<-start
			results[i] = r.runOnce(ctx, jobName(tick), ttl, work)
		})
	}
	close(start)
	wg.Wait()
	return results
}

// runOnce runs work under the lock name if no other replica holds it.
//
// rs.Do renews the lock in the background for as long as work runs, so a
// TTL much shorter than the job is fine: the TTL only bounds how long a
// crashed replica keeps the job from the others. Do cancels work's ctx if the
// lock is lost, and releases it when work returns.
//
// Each replica makes a few attempts a few milliseconds apart rather than one
// (TryLockContext, WithTries(1)): replicas firing at the same instant can
// split the nodes between them so that none gets a majority, and with a single
// attempt each, nobody would run the tick. The winner holds the lock for the
// whole job, so the others' later attempts find it held. (A replica that fires
// after the job has finished would run it again: the lock keeps runs from
// overlapping, it does not remember them. A job that must run at most once per
// tick also records that it ran, for example with SET job:done:<tick> NX.)
func (r *replica) runOnce(ctx context.Context, name string, ttl time.Duration, work job) result {
	res := result{Replica: r.id}
	res.Err = r.rs.Do(ctx, name, func(ctx context.Context) error {
		res.Ran = true
		began := time.Now()
		defer func() { res.Took = time.Since(began) }()
		return work(ctx)
	},
		mutex.WithTTL(ttl),
		mutex.WithTries(3),
		mutex.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
	return res
}

// nightlyReport is the demo's job: it works for d, or stops as soon as ctx
// is cancelled (the lock was lost) and says why.
func nightlyReport(d time.Duration) job {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("report abandoned: %w", context.Cause(ctx))
		}
	}
}
