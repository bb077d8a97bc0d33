package mutex_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// These tests pause real redis-server processes (SIGSTOP): the kernel still
// accepts and buffers the commands, and the server runs them all when it is
// resumed, which is exactly how a late reply arrives in production.

func TestOnePausedNodeDoesNotSlowLocking(t *testing.T) {
	b := realBackend(t, 5)
	b.real[2].Pause()
	m := b.set(t, redlock.WithNodeTimeout(0)).NewMutex("paused-minority", mutex.WithTTL(8*time.Second))
	for range 5 {
		within(t, time.Second, func() { require.NoError(t, m.LockContext(t.Context())) })
		within(t, time.Second, func() { require.NoError(t, m.ExtendContext(t.Context())) })
		within(t, time.Second, func() { require.NoError(t, m.UnlockContext(t.Context())) })
	}
	b.real[2].Resume()
	m.Settle()
	assert.Zero(t, b.present(t, "paused-minority"), "the paused node ran the queued acquires, then their releases")
}

func TestPausedMajorityFailsWithinBoundAndLeavesNoKey(t *testing.T) {
	b := realBackend(t, 5)
	for _, i := range []int{0, 1, 4} {
		b.real[i].Pause()
	}
	rs := b.set(t, redlock.WithNodeTimeout(0)) // derived from the TTL: 80ms
	m := rs.NewMutex("paused-majority")
	var err error
	within(t, time.Second, func() { err = m.TryLockContext(t.Context()) })
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.ErrorIs(t, err, mutex.ErrNodeTimeout)
	assert.Zero(t, b.present(t, "paused-majority", 2, 3), "the answering nodes were rolled back at once")
	// Again, once the paused nodes are stalled and nothing is sent to them:
	// each is still reported as a per-node timeout.
	within(t, time.Second, func() { err = m.TryLockContext(t.Context()) })
	requireNodeTimeouts(t, err, 3)

	// Long enough for attempts to be decided (each in about one per-node
	// timeout) even when timers fire late on a busy machine: the error
	// then keeps their cause beside ctx's.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	within(t, 3*time.Second, func() { err = m.LockContext(ctx) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)

	for _, i := range []int{0, 1, 4} {
		b.real[i].Resume()
	}
	m.Settle()
	assert.Zero(t, b.present(t, "paused-majority"), "acquires that landed late were released after them")
	require.NoError(t, rs.NewMutex("paused-majority").TryLockContext(t.Context()))
}

// A request deadline during an outage gets the outage's error, not "held by
// someone else": with 3 of 5 nodes hung and a per-node timeout of 500ms (the
// ceiling the hung nodes' round trips derive), every call after the first,
// each under a 300ms ctx, fails with ErrNodesUnavailable and a NodeError
// matching ErrNodeTimeout (the first is the hung nodes' first silence, not
// yet judged). With clients as NewFromURLs makes them (1s read timeout, no
// retries), the code that did not judge the nodes when ctx ended failed 2
// of these 12 with "interrupted before a majority answered" and ctx's error
// alone; with a 250ms read timeout, a node's silence must also outlast its
// round trips: the code that judged the round trip in flight alone (a new
// one after each read timeout) failed 9 or 10 of them.
func TestRequestDeadlineDuringAnOutageIsNodesUnavailable(t *testing.T) {
	for _, read := range []time.Duration{time.Second, 250 * time.Millisecond} {
		t.Run(fmt.Sprintf("read timeout %v", read), func(t *testing.T) {
			servers := redistest.Start(t, 5)
			clients := make([]redis.UniversalClient, len(servers))
			for i, s := range servers {
				clients[i] = s.Client(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = read, -1 })
			}
			rs := newSet(t, clients, redlock.WithNodeTimeout(500*time.Millisecond))
			for _, s := range servers[:3] {
				s.Pause()
				defer s.Resume()
			}
			for i := range 13 {
				opts := []mutex.Option{}
				if i%4 >= 2 {
					opts = append(opts, mutex.WithFencing())
				}
				m := rs.NewMutex(fmt.Sprintf("deadline-%d", i), opts...)
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				var err error
				within(t, 2*time.Second, func() {
					if i%2 == 0 {
						err = m.TryLockContext(ctx)
					} else {
						err = m.LockContext(ctx)
					}
				})
				cancel()
				require.ErrorIs(t, err, mutex.ErrNotObtained)
				assert.NotErrorIs(t, err, mutex.ErrContended, "call %d: no node said the lock is busy", i)
				if i == 0 {
					continue
				}
				assert.ErrorIs(t, err, mutex.ErrNodesUnavailable, "call %d", i)
				assert.ErrorIs(t, err, mutex.ErrNodeTimeout, "call %d", i)
			}
		})
	}
}

// Nodes that granted the lock after the majority was counted hold it as
// the others do: 2 of 5 nodes paused while it is taken grant it once
// resumed; then the key is deleted on 2 of the first 3 and one late node is
// paused. The token is still on a majority (2 answering, 1 paused), so
// ExtendContext fails ErrNodesUnavailable, Until unchanged and not lost,
// and UnlockContext succeeds once the node is back. Review 26: the late
// nodes were not holders, and ExtendContext said ErrNotHeld ("only 2 of 5
// nodes can still hold its token"), Lost closed, in 6 of 6 runs.
func TestNodesThatGrantLateHoldTheLock(t *testing.T) {
	b := realBackend(t, 5)
	rs := b.set(t, redlock.WithNodeTimeout(100*time.Millisecond))
	for _, s := range b.real[3:] {
		s.Pause()
	}
	m := rs.NewMutex("late-grant", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	for _, s := range b.real[3:] {
		s.Resume()
	}
	m.Settle()
	require.Equal(t, 5, b.holders(t, "late-grant", m.Value()), "the late nodes ran the acquire")
	for _, c := range b.admin[:2] {
		require.NoError(t, c.Del(t.Context(), "late-grant").Err())
	}
	b.real[3].Pause()
	t.Cleanup(b.real[3].Resume)
	until := m.Until()
	err := m.ExtendContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.NotErrorIs(t, err, mutex.ErrNotHeld)
	assert.Equal(t, until, m.Until())
	require.NoError(t, m.LostCause())
	b.real[3].Resume()
	require.NoError(t, m.UnlockContext(t.Context()))
}

func TestLateAcquireAfterUnlockIsReleased(t *testing.T) {
	b := realBackend(t, 3)
	b.real[0].Pause()
	m := b.set(t, redlock.WithNodeTimeout(0)).NewMutex("late-straggler", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
	// The paused node has the acquire queued and will take the key for a
	// minute when it resumes, unless the release is queued after it.
	b.real[0].Resume()
	m.Settle()
	assert.Zero(t, b.present(t, "late-straggler"))
}

func TestExtendAndUnlockWithMajorityPaused(t *testing.T) {
	b := realBackend(t, 3)
	m := b.set(t, redlock.WithNodeTimeout(0)).NewMutex("extend-paused")
	require.NoError(t, m.LockContext(t.Context()))
	until := m.Until()
	b.real[0].Pause()
	b.real[1].Pause()

	var err error
	within(t, time.Second, func() { err = m.ExtendContext(t.Context()) })
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.NotErrorIs(t, err, mutex.ErrNotHeld)
	assert.Equal(t, until, m.Until(), "a failed extend leaves the old validity")

	done := m.Done()
	within(t, time.Second, func() { err = m.UnlockContext(t.Context()) })
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.Zero(t, b.present(t, "extend-paused", 2), "the healthy node was released")
	assert.True(t, closedNow(done), "the release sent may land at any moment: the holder's work ends")

	b.real[0].Resume()
	b.real[1].Resume()
	// The Mutex kept its token, so the release can be retried.
	require.NoError(t, m.UnlockContext(t.Context()))
	m.Settle()
	assert.Zero(t, b.present(t, "extend-paused"))
}

func TestIdleRedlockRunsNoGoroutines(t *testing.T) {
	b := realBackend(t, 5)
	rs := b.set(t, redlock.WithNodeTimeout(0))
	for _, c := range b.clients { // warm the pools, whose connections are not ours to count
		require.NoError(t, c.Ping(t.Context()).Err())
	}
	baseline := goleak.IgnoreCurrent()
	b.real[3].Pause()
	m := rs.NewMutex("idle")
	for range 3 {
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.ExtendContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
	}
	b.real[3].Resume()
	m.Settle()
	goleak.VerifyNone(t, baseline)
}

func TestBlackholedNodeDoesNotSlowLocking(t *testing.T) {
	b := miniBackend(t, 4)
	bh := newBlackhole(t)
	// go-redis defaults: 5s read timeout, ContextTimeoutEnabled off.
	hole := closing(t, redis.NewClient(&redis.Options{Addr: bh.addr()}))
	rs := newSet(t, append([]redis.UniversalClient{hole}, b.clients...))
	m := rs.NewMutex("blackhole", mutex.WithTTL(8*time.Second))
	for range 3 {
		within(t, time.Second, func() { require.NoError(t, m.LockContext(t.Context())) })
		within(t, time.Second, func() { require.NoError(t, m.ExtendContext(t.Context())) })
		within(t, time.Second, func() { require.NoError(t, m.UnlockContext(t.Context())) })
	}
}

func TestBlackholedMajorityFailsWithinNodeTimeout(t *testing.T) {
	b := miniBackend(t, 2)
	var all []redis.UniversalClient
	for range 3 {
		all = append(all, closing(t, redis.NewClient(&redis.Options{Addr: newBlackhole(t).addr()})))
	}
	rs := newSet(t, append(all, b.clients...), redlock.WithNodeTimeout(50*time.Millisecond))
	m := rs.NewMutex("blackhole-majority")
	var err error
	within(t, time.Second, func() { err = m.TryLockContext(t.Context()) })
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.ErrorIs(t, err, mutex.ErrNodeTimeout)
	assert.Zero(t, b.present(t, "blackhole-majority"), "the two live nodes were rolled back")
}

// A node that fails fast must not turn "held by another owner" into
// ErrNodesUnavailable: the lock is held on the four nodes that answer, and
// Extend and Unlock of stale holders must report ErrNotHeld, the signal that
// their work may have overlapped another owner's, not a lack of nodes.
func TestHeldStaysHeldWithANodeDown(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		// Clients that fail at once on a refused connection, as
		// recommended: with go-redis's retries the failure would come
		// after the No votes anyway. (PoolSize: fewer failed dials than
		// the pool size never start go-redis's background re-dial, which
		// outlives Close.)
		var clients []redis.UniversalClient
		for _, a := range b.addrs {
			clients = append(clients, closing(t, redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1, PoolSize: 100})))
		}
		rs := newSet(t, clients, redlock.WithNodeTimeout(time.Second))
		const name = "one-node-down"
		stale := make([]*mutex.Mutex, 2)
		for i := range stale {
			stale[i] = rs.NewMutex(name)
			require.NoError(t, stale[i].LockContext(t.Context()))
			stale[i].Settle()
			b.del(t, name) // as if it had expired
		}
		owner := rs.NewMutex(name)
		require.NoError(t, owner.LockContext(t.Context()))
		owner.Settle()
		b.kill(0)

		for range 10 {
			err := rs.NewMutex(name).TryLockContext(t.Context())
			require.ErrorIs(t, err, mutex.ErrNotObtained)
			require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "held on four of five")
		}
		err := stale[0].ExtendContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotHeld)
		require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		err = stale[1].UnlockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotHeld)
		require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		require.NoError(t, owner.UnlockContext(t.Context()))
	})
}

// An UnlockContext that could not confirm its release (a majority paused)
// says to retry. A retry after the validity, once the queued releases ran or
// the keys expired, must not report ErrNotHeld, the overlap alarm: the work
// ended when the first call began, within the validity.
func TestUnlockRetriedAfterTheValidityIsNoFalseAlarm(t *testing.T) {
	b := realBackend(t, 3)
	m := b.set(t, redlock.WithNodeTimeout(200*time.Millisecond)).NewMutex("unlock-retry", mutex.WithTTL(300*time.Millisecond))
	require.NoError(t, m.LockContext(t.Context()))
	b.real[0].Pause()
	b.real[1].Pause()
	require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNodesUnavailable)
	// Wait out the validity: no signal exists for time passing.
	time.Sleep(time.Until(m.Until()) + 50*time.Millisecond)
	b.real[0].Resume()
	b.real[1].Resume()
	m.Settle()
	require.NoError(t, m.UnlockContext(t.Context()), "our keys are gone: released or expired after the work ended")
	assert.Zero(t, b.present(t, "unlock-retry"))
	require.NoError(t, m.TryLockContext(t.Context()), "the Mutex holds nothing now")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A LockContext that retries through a hang of a majority, and wins once one
// node comes back, leaves no failed attempt's key on the nodes still hung:
// their acquires, abandoned by the client's read timeout, run when they
// resume, possibly after the rollback's release sent on a new connection;
// the release is sent again once such a node answers.
func TestARetryThroughAHungMajorityLeavesNoKey(t *testing.T) {
	servers := redistest.Start(t, 5)
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = time.Second, -1 })
	}
	b := &backend{real: servers, admin: clients}
	rs := newSet(t, clients)
	warm := rs.NewMutex("warm")
	require.NoError(t, warm.LockContext(t.Context()))
	require.NoError(t, warm.UnlockContext(t.Context()))
	for _, s := range servers[2:] {
		s.Pause()
	}
	time.AfterFunc(2*time.Second, servers[2].Resume)
	m := rs.NewMutex("retry-through-hang", mutex.WithTTL(20*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, m.LockContext(ctx))
	servers[3].Resume()
	servers[4].Resume()
	require.NoError(t, m.UnlockContext(t.Context()))
	assert.Eventually(t, func() bool { return b.present(t, "retry-through-hang") == 0 }, 5*time.Second, 50*time.Millisecond,
		"no key left on any node (a failed attempt's would stay its 20s TTL)")
}

// jumpClock is the real clock read with an offset that a test moves forward
// without firing any timer: a process that reads the time after a long gap.
type jumpClock struct{ offset atomic.Int64 }

func (c *jumpClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *jumpClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *jumpClock) NewTimer(d time.Duration) clock.Timer {
	return clock.Real().NewTimer(d)
}
func (c *jumpClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real().AfterFunc(d, f)
}

// A renewal that a majority extended only after the validity had ended
// loses the lease to whoever was slow, the nodes here (this process ran
// promptly; a starved one's loss is ErrLost alone): never ErrNotHeld, which
// says the nodes no longer hold the token, though they extended it (review
// 41: 11 of 3,000 leases of a starved process were blamed on the nodes so).
func TestALeaseRenewedTooLateIsNotCalledGone(t *testing.T) {
	b := realBackend(t, 3)
	jump := &jumpClock{}
	m := b.set(t, redlock.WithClock(jump)).NewMutex("renewed-late", mutex.WithTTL(3*time.Second), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	lost := m.Lost()
	require.Eventually(t, func() bool { return b.present(t, m.Key()) == 3 }, 3*time.Second, 5*time.Millisecond,
		"the acquire, decided at a majority, has run on every node: node 0's next script is the renewal")
	before := b.scripts(0)
	b.real[1].Pause()
	b.real[2].Pause()
	t.Cleanup(b.real[1].Resume)
	t.Cleanup(b.real[2].Resume)
	require.Eventually(t, func() bool { return b.scripts(0) > before }, 3*time.Second, 5*time.Millisecond, "the first renewal reaches node 0")
	jump.offset.Store(int64(time.Hour)) // the majority's answers are read an hour on
	b.real[1].Resume()
	b.real[2].Resume()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the lease outlived a renewal answered an hour late")
	}
	cause := m.LostCause()
	require.ErrorIs(t, cause, mutex.ErrLost)
	require.NotErrorIs(t, cause, mutex.ErrNotHeld, "the nodes extended it: %v", cause)
	require.ErrorIs(t, cause, mutex.ErrNodesUnavailable, "they answered after the validity: %v", cause)
	assert.ErrorContains(t, cause, "a majority answered after 1h")
}
