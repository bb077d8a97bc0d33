package mutex_test

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

// A majority of nodes that refuse this client as it is configured (a
// password it lacks, here) fails LockContext at once with
// ErrNodesUnavailable naming the cause: waiting does not change it. It used
// to retry silently until ctx ended, for ever without a deadline (review
// 35). A minority refusing costs nothing.
func TestLockContextStopsOnNodesRefusingTheClient(t *testing.T) {
	guarded := redistest.Start(t, 2, redistest.WithPassword("s3cret"))
	open := redistest.Start(t, 2)
	client := func(s *redistest.Server) redis.UniversalClient {
		return closing(t, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	rs := newSet(t, []redis.UniversalClient{client(guarded[0]), client(guarded[1]), client(open[0])}, redlock.WithNodeTimeout(time.Second))
	err := rs.NewMutex("refused").LockContext(ctx)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "returned before ctx ended: %v", err)
	assert.Contains(t, err.Error(), "NOAUTH")
	assert.Contains(t, err.Error(), "2 refuse this client's credentials or ACL permissions")

	// Every waiting acquisition stops too: a Semaphore's AcquireContext
	// waited out its ctx, for ever without a deadline (review 41).
	for limit := range []int{1, 2, 9} {
		_, err = rs.NewSemaphore("refused-sem", limit+1).AcquireContext(ctx)
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "limit %d", limit+1)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "returned before ctx ended: %v", err)
		assert.Contains(t, err.Error(), "refuse this client's credentials or ACL permissions")
	}
	rw := rs.NewRWMutex("refused-rw")
	require.ErrorIs(t, rw.RLockContext(ctx), mutex.ErrNodesUnavailable)
	require.ErrorIs(t, rw.LockContext(ctx), mutex.ErrNodesUnavailable)
	require.ErrorIs(t, rs.NewMultiMutex([]string{"refused-a", "refused-b"}).LockContext(ctx), mutex.ErrNodesUnavailable)
	require.NoError(t, ctx.Err(), "every call returned at once")

	rs = newSet(t, []redis.UniversalClient{client(guarded[0]), client(open[0]), client(open[1])}, redlock.WithNodeTimeout(time.Second))
	m := rs.NewMutex("refused-by-one")
	require.NoError(t, m.LockContext(ctx), "a majority accepts the client")
	require.NoError(t, m.UnlockContext(ctx))
}
