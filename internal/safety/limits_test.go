package safety_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// These tests document, deterministically, what Redlock does not protect
// against. Each passes when the weakness shows; docs/reliability.md cites them.

// fastSet is a node set over fresh clients that fail at once on a refused
// connection, as a separate service with its own connections would have.
func fastSet(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	}
	rs, err := redlock.New(clients, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	return rs
}

// TestEmptyRestartCanAdmitSecondOwner: A holds the lock on nodes 0 and 1 (2
// of 3; node 2 is down). Node 1 restarts at once without persistence and
// forgets A's key. B then finds nodes 1 and 2 empty, a majority, and gets the
// lock while A's validity has not ended: two owners.
func TestEmptyRestartCanAdmitSecondOwner(t *testing.T) {
	servers := redistest.Start(t, 3)
	a, b := fastSet(t, servers), fastSet(t, servers)
	servers[2].Kill()
	ma := a.NewMutex("limit:restart", mutex.WithTTL(30*time.Second))
	require.NoError(t, ma.LockContext(t.Context()))
	servers[2].RestartEmpty()
	servers[1].RestartEmpty() // immediately, no AOF: node 1 forgets A's key

	mb := b.NewMutex("limit:restart", mutex.WithTTL(30*time.Second))
	require.NoError(t, mb.TryLockContext(t.Context()), "B got a majority from two empty nodes")
	assert.True(t, time.Now().Before(ma.Until()), "while A's validity has not ended: two owners")
}

// TestAOFRestartKeepsTheLock is the same sequence with nodes that persist
// every write (appendonly yes, appendfsync always): node 1 comes back with
// A's key and B is refused.
func TestAOFRestartKeepsTheLock(t *testing.T) {
	servers := redistest.Start(t, 3, redistest.WithAOF())
	a, b := fastSet(t, servers), fastSet(t, servers)
	servers[2].Kill()
	ma := a.NewMutex("limit:restart", mutex.WithTTL(30*time.Second))
	require.NoError(t, ma.LockContext(t.Context()))
	servers[2].RestartEmpty()
	servers[1].Restart() // kill -9, then reload the AOF

	mb := b.NewMutex("limit:restart", mutex.WithTTL(30*time.Second))
	err := mb.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.NoError(t, ma.UnlockContext(t.Context()))
}

// TestHolderPausedPastValidity: A takes a short lock and then stops doing
// anything (a GC pause, a stopped VM). Its keys expire and B gets the lock.
// Nothing can stop A from acting when it resumes; what the library gives A is
// the truth: Until has passed, and Extend and Unlock report ErrNotHeld while
// leaving B's lock intact.
func TestHolderPausedPastValidity(t *testing.T) {
	servers := redistest.Start(t, 3)
	a, b := fastSet(t, servers), fastSet(t, servers)
	ma := a.NewMutex("limit:pause", mutex.WithTTL(300*time.Millisecond))
	require.NoError(t, ma.LockContext(t.Context()))

	// B waits: it gets the lock only once A's keys have expired.
	mb := b.NewMutex("limit:pause", mutex.WithTTL(30*time.Second), mutex.WithRetryDelay(time.Millisecond, 20*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, mb.LockContext(ctx))
	bGot := time.Now()

	assert.True(t, ma.Until().Before(bGot), "A's validity ended before B got in: the lock kept its promise")
	// A "resumes" and asks.
	require.ErrorIs(t, ma.ExtendContext(t.Context()), mutex.ErrNotHeld)
	require.ErrorIs(t, ma.UnlockContext(t.Context()), mutex.ErrNotHeld)
	require.NoError(t, mb.ExtendContext(t.Context()), "B's lock is intact")
	require.NoError(t, mb.UnlockContext(t.Context()))
}

// TestNodeClockJumpCanAdmitSecondOwner: the clocks of nodes 0 and 1 jump
// forward (simulated by cutting the remaining TTL of A's key there, which is
// what a jump does to it), so A's keys expire early on a majority and B gets
// the lock while A's validity, computed on A's monotonic clock, has not ended.
func TestNodeClockJumpCanAdmitSecondOwner(t *testing.T) {
	servers := redistest.Start(t, 3)
	a, b := fastSet(t, servers), fastSet(t, servers)
	ma := a.NewMutex("limit:clock", mutex.WithTTL(30*time.Second))
	require.NoError(t, ma.LockContext(t.Context()))
	// LockContext returns at a majority: the jump comes once A's key is on
	// every node (an acquire that ran after it would set the key afresh).
	require.True(t, pollUntil(func() bool {
		for _, s := range servers {
			if s.Do(t, "EXISTS", "limit:clock") != int64(1) {
				return false
			}
		}
		return true
	}), "A's key on every node")
	for _, s := range servers[:2] {
		s.Do(t, "PEXPIRE", "limit:clock", 1) // the node's clock jumped ~30s ahead
	}
	mb := b.NewMutex("limit:clock", mutex.WithTTL(30*time.Second), mutex.WithRetryDelay(time.Millisecond, 5*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, mb.LockContext(ctx))
	assert.True(t, time.Now().Before(ma.Until()), "A still believes it holds the lock: two owners")
}
