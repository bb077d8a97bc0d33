package mutex_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// pubsubConns counts the pub/sub connections node i has open.
func pubsubConns(t *testing.T, b *backend, i int) int {
	t.Helper()
	list, err := b.admin[i].ClientList(t.Context()).Result()
	require.NoError(t, err)
	n := 0
	for line := range strings.Lines(list) {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			n++
		}
	}
	return n
}

// A waiter that finds the lock held is woken by the release, not by its
// retry timer: with an hour of retry delay and an hour of TTL, only the
// release notification can hand it the lock. Both within one process (the
// holder's Unlock wakes it directly) and across processes (separate node
// sets and clients: the nodes' messages wake it).
func TestWaitersAreWokenByTheRelease(t *testing.T) {
	b := realBackend(t, 3)
	for name, holderSet := range map[string]*redlock.Redlock{
		"same set":    nil,
		"another set": newSet(t, b.clients, redlock.WithNodeTimeout(time.Second)),
	} {
		t.Run(name, func(t *testing.T) {
			rs := b.set(t)
			if holderSet == nil {
				holderSet = rs
			}
			holder := holderSet.NewMutex("wake", mutex.WithTTL(time.Hour))
			require.NoError(t, holder.LockContext(t.Context()))
			waiter := rs.NewMutex("wake", mutex.WithRetryDelay(time.Hour, time.Hour))
			done := make(chan error, 1)
			go func() { done <- waiter.LockContext(t.Context()) }()
			require.Eventually(t, func() bool {
				return pubsubConns(t, b, 0) == 1 && pubsubConns(t, b, 1) == 1 && pubsubConns(t, b, 2) == 1
			}, 10*time.Second, time.Millisecond, "the waiter subscribed on every node")
			require.NoError(t, holder.UnlockContext(t.Context()))
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter was not woken by the release")
			}
			require.NoError(t, waiter.UnlockContext(t.Context()))
		})
	}
}

// One pub/sub connection per node serves every waiter of a node set, and it
// is closed when nobody waits any more.
func TestOneSubscriptionConnectionPerNode(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	holder := rs.NewMutex("shared-sub", mutex.WithTTL(time.Hour))
	require.NoError(t, holder.LockContext(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_ = rs.NewMutex("shared-sub", mutex.WithRetryDelay(time.Hour, time.Hour)).LockContext(ctx)
		})
	}
	require.Eventually(t, func() bool { return rs.Waiting("shared-sub") == 10 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		return pubsubConns(t, b, 0) == 1 && pubsubConns(t, b, 1) == 1 && pubsubConns(t, b, 2) == 1
	}, 10*time.Second, time.Millisecond, "one connection per node")
	for i := range 3 {
		assert.Equal(t, 1, pubsubConns(t, b, i), "node %d: still one connection for ten waiters", i)
	}
	cancel()
	wg.Wait()
	require.Eventually(t, func() bool {
		return pubsubConns(t, b, 0)+pubsubConns(t, b, 1)+pubsubConns(t, b, 2) == 0
	}, 10*time.Second, time.Millisecond, "closed once nobody waits")
	require.NoError(t, holder.UnlockContext(t.Context()))
}

// A holder that crashes never publishes a release. Its waiter still gets the
// lock when the holder's key expires, because an attempt that finds the lock
// held learns the key's remaining TTL and sleeps at most that long.
func TestCrashedHolderIsTakenOverAtExpiry(t *testing.T) {
	b := realBackend(t, 3)
	for _, opts := range [][]redlock.Option{nil, {redlock.WithoutNotifications()}} {
		rs := b.set(t, opts...)
		crashed := rs.NewMutex("crashed", mutex.WithTTL(300*time.Millisecond))
		require.NoError(t, crashed.LockContext(t.Context())) // and never unlocks
		waiter := rs.NewMutex("crashed", mutex.WithRetryDelay(time.Hour, time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		require.NoError(t, waiter.LockContext(ctx), "taken over at expiry, not an hour later")
		cancel()
		require.NoError(t, waiter.UnlockContext(t.Context()))
	}
}

// Waiters of one process get the lock in the order they came.
func TestWaitersOfAProcessGoFirstComeFirstServed(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	holder := rs.NewMutex("fifo", mutex.WithTTL(time.Hour))
	require.NoError(t, holder.LockContext(t.Context()))
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		m := rs.NewMutex("fifo", mutex.WithRetryDelay(time.Hour, time.Hour))
		wg.Go(func() {
			require.NoError(t, m.LockContext(t.Context()))
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			require.NoError(t, m.UnlockContext(t.Context()))
		})
		// The next waiter comes only once this one is queued.
		require.Eventually(t, func() bool { return pubsubConns(t, b, 0) == 1 && rs.Waiting("fifo") == i+1 }, 10*time.Second, time.Millisecond)
	}
	require.NoError(t, holder.UnlockContext(t.Context()))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

// A waiter queued behind another must not sleep past a crashed holder's
// expiry when the one ahead of it gives up: the turn passes on, and it looks
// at the lock at once, learning when the holder's key expires.
func TestWaiterBehindOneThatGivesUpTakesOverAtExpiry(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	crashed := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second)).NewMutex("given-up", mutex.WithTTL(time.Second))
	require.NoError(t, crashed.LockContext(t.Context())) // and never unlocks

	ctx1, giveUp := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		first <- rs.NewMutex("given-up", mutex.WithRetryDelay(time.Hour, time.Hour)).LockContext(ctx1)
	}()
	require.Eventually(t, func() bool { return rs.Waiting("given-up") == 1 }, 10*time.Second, time.Millisecond)
	second := rs.NewMutex("given-up", mutex.WithRetryDelay(time.Hour, time.Hour))
	got := make(chan error, 1)
	go func() { got <- second.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return rs.Waiting("given-up") == 2 }, 10*time.Second, time.Millisecond)
	giveUp()
	require.ErrorIs(t, <-first, context.Canceled)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the second waiter slept past the holder's expiry")
	}
	require.NoError(t, second.UnlockContext(t.Context()))
}

// A waiter that gave up returns at once, its leaving the queues sent but not
// awaited: on each node it goes before anything its Redlock sends later, so
// a TryLockContext of the same Redlock made right after (a duplicate request
// answered 409 or let through) is not refused for a waiter that is gone.
// 20 rounds: unordered, the removal and the next attempt would race.
func TestAWaiterThatGaveUpHasLeftWhenItReturns(t *testing.T) {
	b := realBackend(t, 3)
	holders, waiters := b.set(t), b.set(t)
	for round := range 20 {
		holder := holders.NewMutex("left", mutex.WithTTL(time.Minute))
		require.NoError(t, holder.LockContext(t.Context()))
		ctx, giveUp := context.WithCancel(t.Context())
		gaveUp := make(chan error, 1)
		go func() { gaveUp <- waiters.NewMutex("left").LockContext(ctx) }()
		require.Eventually(t, func() bool { return waiters.Waiting("left") == 1 }, 10*time.Second, time.Millisecond)
		giveUp()
		require.ErrorIs(t, <-gaveUp, context.Canceled)
		require.NoError(t, holder.UnlockContext(t.Context()))
		other := waiters.NewMutex("left")
		require.NoError(t, other.TryLockContext(t.Context()), "round %d: refused for a waiter that gave up", round)
		require.NoError(t, other.UnlockContext(t.Context()))
	}
}

// Callers of one Redlock waiting on one name, behind the oldest of them,
// look at the nodes only to keep their places (every RetryMax to twice
// that, not every half to whole RetryMax): the oldest is the nodes' next
// and is told of the release. Before, 900 callers on one name with no hold
// time kept the nodes so busy with their looks that each hand-off waited
// behind hundreds of them (4 to 8s in most runs where 0.5s is the rule,
// and calls ran out of an 8s ctx).
func TestWaitersBehindTheOldestOfTheirProcessOnlyKeepTheirPlaces(t *testing.T) {
	const waiters, retryMax, window = 50, 100 * time.Millisecond, time.Second
	b := realBackend(t, 3)
	rs := b.set(t)
	holder := rs.NewMutex("crowd", mutex.WithTTL(time.Hour))
	require.NoError(t, holder.LockContext(t.Context()))
	var wg sync.WaitGroup
	for range waiters {
		m := rs.NewMutex("crowd", mutex.WithRetryDelay(retryMax/10, retryMax))
		wg.Go(func() {
			assert.NoError(t, m.LockContext(t.Context()))
			assert.NoError(t, m.UnlockContext(t.Context()))
		})
	}
	require.Eventually(t, func() bool { return rs.Waiting("crowd") == waiters }, 10*time.Second, time.Millisecond)
	before := b.scripts(0)
	time.Sleep(window) // the looks to count
	looks := b.scripts(0) - before
	require.NoError(t, holder.UnlockContext(t.Context()))
	wg.Wait()
	// A look is one script call on each node. Every half to whole RetryMax,
	// 50 waiters looked about 640 times in 1s; once per RetryMax to twice
	// that (the oldest as before), about 260 to 340.
	t.Logf("%d script calls on node 0 in %v from %d waiters", looks, window, waiters)
	assert.Less(t, looks, int64(waiters*window/retryMax))
}

// Waiters behind the oldest of their Redlock whose looks only keep their
// places skip a look while this process's attempts on the name queue (they
// take turns), and take the latest outcome of those attempts as theirs: in
// an outage that starts while they wait, every one of them reports it, not
// a "held by another owner" from before it. A majority of nodes killed
// (commands fail at once) or paused (each attempt waits the per-node timeout).
func TestWaitersBehindTheOldestReportAnOutage(t *testing.T) {
	for _, fault := range []string{"killed", "paused"} {
		t.Run(fault, func(t *testing.T) {
			const waiters = 50
			b := realBackend(t, 3)
			rs := b.set(t, redlock.WithNodeTimeout(100*time.Millisecond))
			require.NoError(t, b.set(t).NewMutex("outage", mutex.WithTTL(time.Hour)).LockContext(t.Context()))
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			errs := make(chan error, waiters)
			for range waiters {
				m := rs.NewMutex("outage", mutex.WithRetryDelay(10*time.Millisecond, 100*time.Millisecond))
				go func() { errs <- m.LockContext(ctx) }()
			}
			require.Eventually(t, func() bool { return rs.Waiting("outage") == waiters }, 10*time.Second, time.Millisecond)
			for _, i := range []int{1, 2} {
				if fault == "killed" {
					b.kill(i)
				} else {
					b.real[i].Pause()
					defer b.real[i].Resume()
				}
			}
			for range waiters {
				err := <-errs
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "%v", err)
			}
		})
	}
}

// Thousands of callers of one Redlock on one name all have the lock in
// turn. Their looks to keep their places in the nodes' queues took turns
// with the attempts of the caller in line, which then waited behind
// thousands of them: 1,500 callers took 44s here under the race detector,
// and of 3,000 (without it) 101 to 205 had the lock within 10s. A look to
// keep a place is now skipped while another attempt of the process on the
// name is in progress or waits.
func TestThousandsOfWaitersOnOneNameAllHaveTheLock(t *testing.T) {
	const callers = 1500
	b := realBackend(t, 3)
	rs := b.set(t)
	holder := rs.NewMutex("thousands", mutex.WithTTL(time.Hour))
	require.NoError(t, holder.LockContext(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // 2.5s here; 44s before
	defer cancel()
	var had, inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for range callers {
		m := rs.NewMutex("thousands")
		wg.Go(func() {
			if m.LockContext(ctx) == nil {
				had.Add(1)
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				assert.NoError(t, m.UnlockContext(t.Context()))
			}
		})
	}
	require.Eventually(t, func() bool { return rs.Waiting("thousands") == callers }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, holder.UnlockContext(t.Context()))
	wg.Wait()
	assert.EqualValues(t, callers, had.Load())
	assert.Zero(t, overlaps.Load(), "callers held the lock at once")
}
