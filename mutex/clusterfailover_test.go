package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Failover under contention, with the restart quarantine: while four
// contenders (two node sets) take and release a fenced lock, the primary of
// its shard is killed and its replica takes over on one Cluster, and on a
// second a manual failover promotes the replica. Never two holders at
// once, fencing tokens strictly increase, and contention continues.
func TestClusterFailoverUnderContention(t *testing.T) {
	start := time.Now()
	clusters := redistest.StartClusters(t, 3, 3, 1)
	t.Logf("3 Clusters of 3 primaries and 3 replicas started in %v", time.Since(start))
	const ttl = time.Second
	opts := []redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond), redlock.WithRestartQuarantine(ttl)}
	rs, other := newSet(t, clusterClients(t, clusters), opts...), newSet(t, clusterClients(t, clusters), opts...)
	const name = "failed-over"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	c := contend(ctx, []*redlock.Redlock{rs, other}, name, mutex.WithTTL(ttl), mutex.WithFencing())
	c.waitFor(t, 20)
	clusters[0].Failover(t, clusters[0].Shard(name))
	c.waitFor(t, c.acquired.Load()+20)
	clusters[1].Promote(t, clusters[1].Shard(name))
	c.waitFor(t, c.acquired.Load()+20)
	c.end(t)
	t.Logf("%d acquisitions through a failover and a promotion", c.acquired.Load())

	m := rs.NewMutex(name, mutex.WithTTL(ttl), mutex.WithFencing())
	require.NoError(t, m.LockContext(ctx))
	require.Greater(t, m.FencingToken(), c.last.Load())
	require.NoError(t, m.UnlockContext(ctx))
}
