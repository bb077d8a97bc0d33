package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// lockClients sets a client as docs/operations.md recommends for locks: a
// stopped node fails at once instead of being dialed again and again.
func lockClients(o *redis.Options) {
	o.MaxRetries, o.DialerRetries = -1, 1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
}

// fastSet is doSet over clients set up as lockClients does.
func fastSet(t *testing.T, servers []*redistest.Server) *redlock.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, lockClients)
	}
	rs, err := redlock.New(clients, redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	return rs
}

func TestForceUnlockEvictsARenewedHolder(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin, next := fastSet(t, servers), fastSet(t, servers), fastSet(t, servers)
	ctx := t.Context()
	m := holders.NewMutex("fu:lease", mutex.WithTTL(1500*time.Millisecond), mutex.WithAutoExtend(), mutex.WithFencing())
	require.NoError(t, m.LockContext(ctx))
	evicted := m.FencingToken()

	ev, err := admin.ForceUnlock(ctx, "fu:lease")
	require.NoError(t, err)
	assert.Equal(t, []string{"fu:lease"}, ev.Removed)
	assert.Greater(t, ev.Fence, evicted, "the counter is raised above the evicted holder's token")
	for _, n := range ev.Nodes {
		require.NoError(t, n.Err)
		assert.GreaterOrEqual(t, n.Fence, ev.Fence)
	}
	assert.Contains(t, ev.String(), "removed fu:lease")

	// The next holder gets it at once (the keys were removed, not left to
	// expire), with a token above the raised counter.
	n := next.NewMutex("fu:lease", mutex.WithTTL(time.Minute), mutex.WithFencing())
	require.NoError(t, n.TryLockContext(ctx))
	t.Cleanup(func() { _ = n.UnlockContext(context.Background()) })
	assert.Greater(t, n.FencingToken(), ev.Fence)

	select {
	case <-m.Lost():
	case <-time.After(doWait):
		require.FailNow(t, "Lost did not close after ForceUnlock")
	}
	require.ErrorIs(t, m.LostCause(), mutex.ErrLost)
	require.ErrorIs(t, m.LostCause(), mutex.ErrNotHeld)
	require.ErrorContains(t, m.LostCause(), "forced open (ForceUnlock)", "the cause names what may have happened")
	require.ErrorContains(t, m.LostCause(), "at most", "decided before every node answered: a bound, not a count of nodes holding it (review 40)")
	require.ErrorIs(t, m.UnlockContext(ctx), mutex.ErrNotHeld, "the evicted holder's release finds its lock lost")
	next.Settle()
	for _, s := range servers {
		if v := s.Do(t, "GET", "fu:lease"); v != nil {
			assert.Equal(t, n.Value(), v, "the evicted holder's renewals never overwrote the next holder's key")
		}
	}
}

func TestForceUnlockRemovesEveryPrimitivesKeys(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := fastSet(t, servers), fastSet(t, servers)
	ctx := t.Context()
	sem := holders.NewSemaphore("fu:sem", 3, mutex.WithTTL(time.Minute))
	for range 3 {
		_, err := sem.AcquireContext(ctx)
		require.NoError(t, err)
	}
	other := admin.NewSemaphore("fu:sem", 3, mutex.WithTTL(time.Minute))
	_, err := other.TryAcquireContext(ctx)
	require.ErrorIs(t, err, mutex.ErrNotObtained, "all three permits are held")

	ev, err := admin.ForceUnlock(ctx, "fu:sem")
	require.NoError(t, err)
	assert.Len(t, ev.Removed, 3, "%v", ev)
	for range 3 {
		p, err := other.TryAcquireContext(ctx)
		require.NoError(t, err, "every permit is free again")
		t.Cleanup(func() { _ = p.ReleaseContext(context.Background()) })
	}

	putRWLock(t, servers, "fu:rw:quorumlock:rw", "W", time.Minute, map[string]time.Duration{"R": time.Minute})
	ev, err = admin.ForceUnlock(ctx, "fu:rw")
	require.NoError(t, err)
	assert.Equal(t, []string{"fu:rw:quorumlock:rw"}, ev.Removed)
	for _, s := range servers {
		s.Do(t, "RPUSH", "fu:list", "data")
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "fu:rw:quorumlock:rw"))
	}

	ev, err = admin.ForceUnlock(ctx, "fu:list")
	require.NoError(t, err)
	assert.Empty(t, ev.Removed, "a key of another type is not a lock's")
	for _, s := range servers {
		assert.Equal(t, int64(1), s.Do(t, "EXISTS", "fu:list"), "left alone")
	}
	assert.Contains(t, ev.String(), "no lock key removed")
}

func TestForceUnlockWithNodesDown(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin, next := fastSet(t, servers), fastSet(t, servers), fastSet(t, servers)
	ctx := t.Context()
	m := holders.NewMutex("fu:down", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(ctx))
	holders.Settle()
	servers[2].Kill()

	ev, err := admin.ForceUnlock(ctx, "fu:down")
	require.NoError(t, err, "two of three nodes answered")
	assert.Equal(t, []string{"fu:down"}, ev.Removed)
	var nodeErr *mutex.NodeError
	require.ErrorAs(t, ev.Nodes[2].Err, &nodeErr)
	assert.Equal(t, servers[2].Addr(), nodeErr.Node)
	assert.Contains(t, ev.String(), servers[2].Addr()+": failed")
	n := next.NewMutex("fu:down", mutex.WithTTL(time.Minute))
	require.NoError(t, n.TryLockContext(ctx), "the lock is free on the nodes that answered")

	servers[1].Kill()
	ev, err = admin.ForceUnlock(ctx, "fu:down")
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.ErrorAs(t, err, &nodeErr)
	assert.Zero(t, ev.Fence)
	assert.Empty(t, ev.Removed)
	assert.Equal(t, n.Value(), servers[0].Do(t, "GET", "fu:down"), "nothing removed without the counter raised on a majority")
	assert.True(t, strings.HasPrefix(ev.String(), `"fu:down": not unlocked`), ev.String())
}

func TestForceUnlockWakesTheNextWaiter(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin, waiters := fastSet(t, servers), fastSet(t, servers), fastSet(t, servers)
	ctx := t.Context()
	m := holders.NewMutex("fu:wake", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(ctx))
	// Between two looks of its own this waiter sleeps 15s to 30s: only the
	// release message can wake it within doWait.
	w := waiters.NewMutex("fu:wake", mutex.WithTTL(time.Minute), mutex.WithRetryDelay(time.Millisecond, 30*time.Second))
	locked := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, doWait)
	defer cancel()
	go func() { locked <- w.LockContext(wctx) }()
	waitSubscribed(t, servers)

	_, err := admin.ForceUnlock(ctx, "fu:wake")
	require.NoError(t, err)
	require.NoError(t, <-locked, "woken by the forced release")
	require.NoError(t, w.UnlockContext(ctx))
}

// waitSubscribed waits until every server has a subscriber to a release
// channel: a waiter asleep until it is told of a release.
func waitSubscribed(t *testing.T, servers []*redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(doWait)
	for _, s := range servers {
		for {
			if chans, _ := s.Do(t, "PUBSUB", "CHANNELS", "quorumlock:released:*").([]any); len(chans) > 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "no waiter subscribed on %s", s.Addr())
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// The operator's calls need what their scripts call, which the minimal ACL
// of docs/operations.md grants; without TYPE and SCAN they
// fail, node by node.
func TestInspectAndForceUnlockWithTheirACL(t *testing.T) {
	servers := redistest.Start(t, 3)
	without := strings.NewReplacer(" +type", "", " +scan", "").Replace(MinimalACL)
	for _, rules := range []string{without, MinimalACL} {
		for _, s := range servers {
			args := []any{"ACL", "SETUSER", "locker", "reset"}
			for _, rule := range strings.Fields(rules) {
				args = append(args, rule)
			}
			require.Equal(t, "OK", s.Do(t, args...))
		}
		rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, "locker:locker-pw@"))
		require.NoError(t, err)
		sem := rs.NewSemaphore("fu:acl", 2, mutex.WithTTL(time.Minute))
		_, err = sem.AcquireContext(t.Context())
		require.NoError(t, err)
		putRWLock(t, servers, "fu:acl:quorumlock:rw", "W", time.Minute, nil)
		in, ierr := rs.Inspect(t.Context(), "fu:acl")
		_, ferr := rs.ForceUnlock(t.Context(), "fu:acl")
		require.NoError(t, rs.Close())
		if rules == without {
			require.ErrorIs(t, ierr, mutex.ErrNodesUnavailable, "without TYPE and SCAN, no inspection")
			assert.ErrorContains(t, ierr, "can't run this command")
			require.ErrorIs(t, ferr, mutex.ErrNodesUnavailable)
			continue
		}
		require.NoError(t, ierr)
		assert.Len(t, in.Locks, 2, "the permit and the read-write lock: %v", in)
		require.NoError(t, ferr)
		for _, s := range servers {
			assert.Equal(t, int64(0), s.Do(t, "EXISTS", "fu:acl:quorumlock:rw"))
		}
	}
}
