package mutex_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// clusterSet starts n Redis Clusters of 3 primaries and returns them with a
// node set over them whose clients fail fast (no retries inside go-redis).
func clusterSet(t *testing.T, n int, opts ...redlock.Option) ([]*redistest.Cluster, *redlock.Redlock) {
	t.Helper()
	start := time.Now()
	clusters := redistest.StartClusters(t, n, 3, 0)
	t.Logf("%d Clusters of 3 primaries started in %v", n, time.Since(start))
	return clusters, newSet(t, clusterClients(t, clusters), opts...)
}

// clusterClients returns one ClusterClient per Cluster with the settings a
// lock wants: no retries, short dial.
func clusterClients(t *testing.T, clusters []*redistest.Cluster) []redis.UniversalClient {
	return redistest.ClusterClients(t, clusters, func(o *redis.ClusterOptions) {
		o.MaxRetries, o.MaxRedirects, o.DialerRetries, o.DialTimeout = -1, -1, 1, time.Second
	})
}

// namesOnShards returns one name per shard of a Cluster of 3 primaries.
func namesOnShards(c *redistest.Cluster, prefix string) []string {
	var names []string
	seen := map[int]bool{}
	for i := 0; len(names) < len(c.Primaries); i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		if sh := c.Shard(name); !seen[sh] {
			seen[sh] = true
			names = append(names, name)
		}
	}
	return names
}

// Fencing on Cluster nodes: each name's tokens strictly increase across
// holders (two node sets, as two processes), different majorities (a
// minority of Clusters has the name's shard paused) and a multi-name lock
// over the same hash tag, whose slot counter it shares.
func TestClusterFencing(t *testing.T) {
	clusters, rs := clusterSet(t, 3, redlock.WithNodeTimeout(100*time.Millisecond))
	other := newSet(t, clusterClients(t, clusters), redlock.WithNodeTimeout(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	names := append(namesOnShards(clusters[0], "fenced"), "{o}:1")
	last := map[string]uint64{}
	take := func(round int, m *mutex.Mutex, name string) {
		t.Helper()
		require.NoError(t, m.LockContext(ctx), "round %d, %s", round, name)
		token := m.FencingToken()
		assert.Greater(t, token, last[name], "round %d, %s: tokens strictly increase", round, name)
		last[name] = token
		require.NoError(t, m.UnlockContext(ctx))
	}
	for round := range 6 {
		for _, name := range names {
			paused := clusters[round%3].Primaries[clusters[round%3].Shard(name)]
			if round >= 3 {
				paused.Pause()
			}
			set := []*redlock.Redlock{rs, other}[round%2]
			m := set.NewMutex(name, mutex.WithFencing())
			take(round, m, name)
			paused.Resume()
			m.Settle()
		}
		multi := rs.NewMultiMutex([]string{"{o}:1", "{o}:2"}, mutex.WithFencing())
		take(round, multi, "{o}:1")
		multi.Settle()
	}
	for _, name := range names { // each name's counter is in its own slot, where Inspect reads it
		in, err := rs.Inspect(ctx, name)
		require.NoError(t, err)
		want := last[name] + passBlock // the counter ends the block a Mutex reserves for passes
		if name == "{o}:1" {
			want = last[name] // a multi-name lock took it last: never passed, it reserves nothing
		}
		assert.Equal(t, want, in.Fence, name)
	}
}
