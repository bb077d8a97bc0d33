package mutex_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A clean slot migration on a Cluster node trips the restart quarantine,
// as docs/operations.md, "Scaling out", says: a process that met the slot
// sees another server (run_id) answer for it, which it cannot tell from a
// replica promoted after missing writes, and keeps that node out of the
// slot's names for the whole quarantine from then. Moved on one Cluster,
// the names still lock on the other two; moved on two at once, they can
// stop until the quarantine ends, and then only the quarantine refuses
// them. The names of other slots are not affected.
func TestClusterSlotMigrationTripsTheQuarantine(t *testing.T) {
	const d = time.Hour
	clusters := redistest.StartClusters(t, 3, 2, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	fake := clock.NewFake(time.Now())
	clients := redistest.ClusterClients(t, clusters, func(o *redis.ClusterOptions) { o.MaxRetries = -1 })
	rs := newSet(t, clients, redlock.WithClock(backoffClock{fake}), redlock.WithRestartQuarantine(d), redlock.WithNodeTimeout(time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const x, other = "x", "moved-not"
	require.NotEqual(t, keyspace.Slot(x), keyspace.Slot(other))
	for _, name := range []string{x, other} { // first contact: young servers
		m := rs.NewMutex(name)
		require.ErrorIs(t, m.TryLockContext(ctx), mutex.ErrQuarantined)
		m.Settle()
	}
	fake.Advance(24 * time.Hour)
	lockOnce := func(name string) error {
		m := rs.NewMutex(name)
		err := m.TryLockContext(ctx)
		if err == nil {
			require.NoError(t, m.UnlockContext(ctx))
		}
		m.Settle()
		return err
	}
	require.NoError(t, lockOnce(x))
	require.NoError(t, lockOnce(other))
	move := func(c *redistest.Cluster) {
		from := c.Shard(x)
		c.MoveSlot(t, keyspace.Slot(x), from, 1-from, 0)
	}
	// afterMove locks x until an attempt is not failed by a MOVED answer
	// (the client's first round after a move may be, before its slot map
	// is reloaded), at most 10 attempts.
	afterMove := func() error {
		var err error
		for range 10 {
			if err = lockOnce(x); err == nil || !strings.Contains(err.Error(), "MOVED") {
				return err
			}
		}
		return err
	}

	move(clusters[0])
	require.NoError(t, afterMove(), "moved on one Cluster: the other two make the majority")
	fake.Advance(d / 2)
	move(clusters[1])
	// Moved on a second Cluster within the quarantine of the first move:
	// the slot's names stop when this process judged both moved nodes by
	// now. It may not have judged the first yet: the round after that
	// move was decided by the other two while the first still answered
	// MOVED from a stale slot map, so its quarantine may start only now,
	// one node at a time. Either way, the only refusal is the quarantine.
	if err := afterMove(); err != nil {
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "%v", err)
		require.ErrorIs(t, err, mutex.ErrQuarantined, "%v", err)
		assert.Equal(t, 2, quarantined(err), "%v", err)
	}
	require.NoError(t, lockOnce(other), "other slots lock as usual")

	fake.Advance(d / 2)
	require.NoError(t, lockOnce(x), "d after the first move, its Cluster counts again: 2 of 3")
}
