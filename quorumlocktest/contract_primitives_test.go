package quorumlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/mutex"
)

func TestContractMutex(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		rs := c.set(t)
		ctx := t.Context()
		a := rs.NewMutex("m", mutex.WithFencing())
		b := rs.NewMutex("m", mutex.WithFencing())
		require.NoError(t, a.LockContext(within(t, 5*time.Second)))
		err := b.TryLockContext(ctx)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "held by someone else")
		require.NoError(t, a.ExtendContext(ctx))
		require.NoError(t, a.UnlockContext(ctx))
		require.NoError(t, b.LockContext(within(t, 5*time.Second)))
		assert.Greater(t, b.FencingToken(), a.FencingToken())
		require.ErrorIs(t, a.UnlockContext(ctx), mutex.ErrNotHeld)
		require.NoError(t, b.UnlockContext(ctx))
	})
}

// Keys expire in real time, without FastForward, and a waiter is woken by
// a release, not by its retry delay (pub/sub notifications work).
func TestContractExpiryAndWakeUp(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		rs := c.set(t)
		ctx := t.Context()
		a := rs.NewMutex("e", mutex.WithTTL(100*time.Millisecond))
		require.NoError(t, a.LockContext(within(t, 5*time.Second)))
		b := rs.NewMutex("e", mutex.WithTTL(time.Minute), mutex.WithRetryDelay(time.Millisecond, 20*time.Millisecond))
		require.NoError(t, b.LockContext(within(t, 5*time.Second)), "a's key expires by itself")
		require.ErrorIs(t, a.UnlockContext(ctx), mutex.ErrNotHeld)

		// A waiter whose retry delay is long is woken by the release.
		w := rs.NewMutex("e", mutex.WithRetryDelay(10*time.Second, 10*time.Second))
		got := make(chan error, 1)
		go func() { got <- w.LockContext(within(t, 5*time.Second)) }()
		require.Eventually(t, func() bool { return rs.Waiting("e") == 1 }, 2*time.Second, time.Millisecond)
		start := time.Now()
		require.NoError(t, b.UnlockContext(ctx))
		require.NoError(t, <-got)
		assert.Less(t, time.Since(start), 2*time.Second, "woken by the release")
		require.NoError(t, w.UnlockContext(ctx))
	})
}

func TestContractSemaphore(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		ctx := t.Context()
		s := c.set(t).NewSemaphore("pool", 2)
		p1, err := s.TryAcquireContext(ctx)
		require.NoError(t, err)
		p2, err := s.TryAcquireContext(ctx)
		require.NoError(t, err)
		_, err = s.TryAcquireContext(ctx)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		require.NoError(t, p1.ReleaseContext(ctx))
		p3, err := s.TryAcquireContext(ctx)
		require.NoError(t, err)
		require.NoError(t, p2.ReleaseContext(ctx))
		require.NoError(t, p3.ReleaseContext(ctx))
	})
}

func TestContractRWMutex(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		rs := c.set(t)
		ctx := t.Context()
		r1, r2, w := rs.NewRWMutex("doc"), rs.NewRWMutex("doc"), rs.NewRWMutex("doc")
		require.NoError(t, r1.RLockContext(within(t, 5*time.Second)))
		require.NoError(t, r2.RLockContext(within(t, 5*time.Second)), "readers share")
		require.ErrorIs(t, w.TryLockContext(ctx), mutex.ErrNotObtained, "a writer waits for readers")
		require.NoError(t, r1.RUnlockContext(ctx))
		require.NoError(t, r2.RUnlockContext(ctx))
		require.NoError(t, w.LockContext(within(t, 5*time.Second)))
		require.ErrorIs(t, r1.TryRLockContext(ctx), mutex.ErrNotObtained, "readers wait for the writer")
		require.NoError(t, w.UnlockContext(ctx))
	})
}

func TestContractMultiNameLock(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		rs := c.set(t)
		ctx := t.Context()
		both := rs.NewMultiMutex([]string{"{acct}:a", "{acct}:b"})
		require.NoError(t, both.LockContext(within(t, 5*time.Second)))
		one := rs.NewMutex("{acct}:b")
		require.ErrorIs(t, one.TryLockContext(ctx), mutex.ErrNotObtained)
		require.NoError(t, both.UnlockContext(ctx))
		require.NoError(t, one.LockContext(within(t, 5*time.Second)))
		require.ErrorIs(t, both.TryLockContext(ctx), mutex.ErrNotObtained, "all or nothing")
		require.NoError(t, one.UnlockContext(ctx))
	})
}

func TestContractIdempotencyStore(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		store := idempotency.New(c.set(t))
		ctx := t.Context()
		runs := 0
		fn := func(context.Context) ([]byte, error) { runs++; return []byte("paid"), nil }
		resp, replayed, err := store.Do(ctx, "pay-1", []byte("10 EUR"), fn)
		require.NoError(t, err)
		assert.False(t, replayed)
		assert.Equal(t, "paid", string(resp))
		resp, replayed, err = store.Do(ctx, "pay-1", []byte("10 EUR"), fn)
		require.NoError(t, err)
		assert.True(t, replayed)
		assert.Equal(t, "paid", string(resp))
		assert.Equal(t, 1, runs)
		_, _, err = store.Do(ctx, "pay-1", []byte("99 EUR"), fn)
		require.ErrorIs(t, err, idempotency.ErrKeyReused)
	})
}

// An election, the metadata stored with a lock, and a handle resumed by
// another Redlock work on the kit as on Redis: the leader is seen by a
// non-candidate, a proclamation and a resignation are observed (woken by
// the nodes' messages), and the next leader's fencing token is larger.
func TestContractElectionMetadataAndHandles(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 3, func(t *testing.T, c *cluster) {
		rs, other := c.set(t), c.set(t)
		ctx := within(t, 10*time.Second)
		a, b := rs.NewElection("leader"), other.NewElection("leader")
		seen := other.NewElection("leader").Observe(ctx)
		require.NoError(t, a.Campaign(ctx, "a"))
		first := <-seen
		for first.Value != "a" { // a vacancy may come first
			first = <-seen
		}
		l, err := other.NewElection("leader").Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, first, l)
		require.NoError(t, a.Proclaim(ctx, "a2"))
		require.Equal(t, "a2", (<-seen).Value)
		won := make(chan error, 1)
		go func() { won <- b.Campaign(ctx, "b") }()
		require.NoError(t, a.Resign(ctx))
		require.NoError(t, <-won)
		for l = <-seen; l.Value != "b"; l = <-seen {
		}
		assert.Greater(t, l.FencingToken, first.FencingToken)
		require.NoError(t, b.Resign(ctx))

		m := rs.NewMutex("report", mutex.WithMetadata("host=a pid=42"))
		require.NoError(t, m.LockContext(ctx))
		in, err := other.Inspect(ctx, "report")
		require.NoError(t, err)
		require.Len(t, in.Locks, 1)
		assert.Equal(t, "host=a pid=42", in.Locks[0].Metadata)
		h, err := m.Handle()
		require.NoError(t, err)
		resumed, err := other.ResumeMutex(ctx, h)
		require.NoError(t, err)
		assert.Equal(t, m.FencingToken(), resumed.FencingToken())
		require.NoError(t, resumed.UnlockContext(ctx))
		in, err = other.Inspect(ctx, "report")
		require.NoError(t, err)
		assert.Empty(t, in.Locks, "released by the resumed Mutex, metadata and all")
	})
}
