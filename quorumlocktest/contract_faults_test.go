package quorumlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestContractMajorityStopped(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		const nodeTimeout = 500 * time.Millisecond
		rs := c.set(t, redlock.WithNodeTimeout(nodeTimeout))
		for i := range 3 {
			c.stop(i)
		}
		start := time.Now()
		err := rs.NewMutex("s").TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		require.Less(t, time.Since(start), nodeTimeout)
		for _, ne := range nodeErrors(t, err) {
			require.NotErrorIs(t, ne, mutex.ErrNodeTimeout, "refused, not timed out: %v", ne)
		}
	})
}

func TestContractMajorityHung(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		rs := c.set(t, redlock.WithNodeTimeout(time.Second))
		for i := range 3 {
			c.hang(i)
		}
		start := time.Now()
		err := rs.NewMutex("h").LockContext(within(t, 100*time.Millisecond))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 600*time.Millisecond)
		for i := range 3 {
			c.unhang(i)
		}
		require.NoError(t, rs.NewMutex("h").LockContext(within(t, 5*time.Second)), "the nodes answer again")
	})
}

func TestContractMajorityRestartedUnderALease(t *testing.T) {
	t.Parallel()
	onKitAndRedis(t, 5, func(t *testing.T, c *cluster) {
		rs := c.set(t)
		m := rs.NewMutex("r", mutex.WithTTL(time.Second), mutex.WithAutoExtend())
		require.NoError(t, m.LockContext(within(t, 5*time.Second)))
		heldOnEveryNode(t, rs, m)
		for i := range 3 { // down together: a renewal between two restarts would put the key back
			c.hang(i)
		}
		for i := range 3 {
			c.restart(i)
		}
		select {
		case <-m.Lost():
		case <-time.After(3 * time.Second):
			t.Fatal("Lost did not close within 3s of a majority restarting empty")
		}
		require.ErrorIs(t, m.LostCause(), mutex.ErrNotHeld)
		require.NoError(t, rs.NewMutex("r").LockContext(within(t, 3*time.Second)), "another owner gets in")
	})
}
