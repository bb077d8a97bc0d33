package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// Clusters form whole: every slot served, keys spread over the shards as
// Shard says, each Cluster independent of the others.
func TestStartClustersServesEverySlot(t *testing.T) {
	start := time.Now()
	clusters := StartClusters(t, 2, 3, 0)
	t.Logf("2 Clusters of 3 primaries in %v", time.Since(start))
	ctx := context.Background()
	for ci, c := range clusters {
		cc := c.Client(t)
		shards := map[int]bool{}
		for k := range 30 {
			key := fmt.Sprintf("k%d", k)
			require.NoError(t, cc.Set(ctx, key, ci, 0).Err())
			i := c.Shard(key)
			shards[i] = true
			assert.Equal(t, fmt.Sprint(ci), c.Primaries[i].Do(t, "GET", key), "key %s on shard %d", key, i)
			n, err := cc.ClusterKeySlot(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, n, int64(keyspace.Slot(key)))
		}
		assert.Len(t, shards, 3, "30 keys spread over every shard")
	}
}

// A failover hands the slots to the replica, which kept the primary's
// writes; the Cluster serves them again.
func TestClusterFailover(t *testing.T) {
	start := time.Now()
	c := StartClusters(t, 1, 3, 1)[0]
	t.Logf("a Cluster of 3 primaries and 3 replicas in %v", time.Since(start))
	ctx := context.Background()
	cc := c.Client(t)
	require.NoError(t, cc.Set(ctx, "a", "1", 0).Err())
	i := c.Shard("a")
	old, replica := c.Primaries[i], c.Replicas[i][0]
	require.NoError(t, c.Primaries[i].Client(t).Wait(ctx, 1, time.Second).Err())
	start = time.Now()
	c.Failover(t, i)
	t.Logf("failover in %v", time.Since(start))
	assert.Same(t, replica, c.Primaries[i])
	assert.False(t, old.Running())
	assert.Equal(t, "1", replica.Do(t, "GET", "a"))
	// go-redis reloads its slot map every 10s; a new client reads it now.
	cc = c.Client(t)
	require.NoError(t, cc.Set(ctx, "a", "2", 0).Err())
	assert.Equal(t, "2", replica.Do(t, "GET", "a"))
}

// A Cluster node restarted without data keeps its identity and slots: it
// comes back empty, serving the same shard.
func TestClusterRestartEmptyKeepsSlots(t *testing.T) {
	c := StartClusters(t, 1, 3, 0)[0]
	ctx := context.Background()
	cc := c.Client(t)
	require.NoError(t, cc.Set(ctx, "a", "1", 0).Err())
	i := c.Shard("a")
	c.Primaries[i].RestartEmpty()
	c.AwaitHealthy(t)
	assert.Nil(t, c.Primaries[i].Do(t, "GET", "a"))
	require.NoError(t, cc.Set(ctx, "a", "2", 0).Err())
	assert.Equal(t, "2", c.Primaries[i].Do(t, "GET", "a"))
}
