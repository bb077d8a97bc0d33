package mutex_test

import (
	"context"
	"fmt"
	"slices"
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

// The restart quarantine on Cluster nodes, per shard: two shard primaries
// (on two of three Clusters) restarted empty under a held lock are kept out
// for the names of their slots, so a second owner cannot get in, while the
// names of the other shards lock as usual; a shard failed over to its
// replica is kept out too.
func TestClusterQuarantinePerShard(t *testing.T) {
	start := time.Now()
	clusters := redistest.StartClusters(t, 3, 3, 1, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	t.Logf("3 Clusters of 3 primaries and 3 replicas started in %v", time.Since(start))
	fake := clock.NewFake(time.Now())
	opts := []redlock.Option{redlock.WithClock(backoffClock{fake}), redlock.WithRestartQuarantine(time.Hour), redlock.WithNodeTimeout(time.Second)}
	// go-redis's default redirects: the failover below answers MOVED, which
	// they follow (with MaxRedirects -1 the first round after it fails).
	clients := func() []redis.UniversalClient {
		return redistest.ClusterClients(t, clusters, func(o *redis.ClusterOptions) { o.MaxRetries = -1 })
	}
	holder, other := newSet(t, clients(), opts...), newSet(t, clients(), opts...)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c0 := clusters[0]
	x, y, z := "x", "", ""
	for _, name := range []string{"y0", "y1", "y2", "y3", "y4", "y5", "y6", "y7"} {
		if sh := c0.Shard(name); sh != c0.Shard(x) && y == "" {
			y = name
		} else if sh != c0.Shard(x) && sh != c0.Shard(y) && z == "" {
			z = name
		}
	}
	require.True(t, y != "" && z != "", "names on each shard")
	// First contact with each name's shards: all young, so quarantined;
	// then the fake clock ages them past the quarantine.
	for _, rs := range []*redlock.Redlock{holder, other} {
		for _, name := range []string{x, y, z} {
			m := rs.NewMutex(name)
			require.ErrorIs(t, m.TryLockContext(ctx), mutex.ErrQuarantined, name)
			m.Settle()
		}
	}
	fake.Advance(24 * time.Hour)

	held := holder.NewMutex(x, mutex.WithTTL(time.Minute))
	require.NoError(t, held.LockContext(ctx))
	for _, c := range clusters[:2] {
		c.Primaries[c.Shard(x)].RestartEmpty()
	}
	for _, c := range clusters[:2] {
		c.AwaitHealthy(t)
	}
	err := other.NewMutex(x).TryLockContext(ctx)
	require.ErrorIs(t, err, mutex.ErrNotObtained, "two Clusters forgot the lock, but their shards are quarantined")
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	assert.Equal(t, 2, quarantined(err))

	m := other.NewMutex(y)
	require.NoError(t, m.TryLockContext(ctx), "the other shards of the same Clusters are not quarantined")
	require.NoError(t, m.UnlockContext(ctx))

	for _, c := range clusters[:2] {
		c.Promote(t, c.Shard(z))
	}
	err = other.NewMutex(z).TryLockContext(ctx)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "a shard failed over may have missed writes")
	assert.Equal(t, 2, quarantined(err))

	fake.Advance(2 * time.Hour)
	m = other.NewMutex(z)
	require.NoError(t, m.TryLockContext(ctx), "after the quarantine")
	require.NoError(t, m.UnlockContext(ctx))
}

// On Cluster nodes each hash slot has its markers: the first locks of a
// slot, many at once on different names, make them in one acquisition too,
// also when the set's first lock was of another slot; then none of the
// slot's shards is quarantined, here or in a process that meets them next.
func TestClusterFirstLocksOfASlotAtOnceMakeItsMarkersInOneAcquisition(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 1, 0)
	var primaries []*redistest.Server
	for _, c := range clusters {
		primaries = append(primaries, c.Primaries...)
	}
	agedPast(t, freshQuarantine, primaries...)
	for round := range 40 { // markers split in about 1 round of 20 without the slot's own first attempt
		prefix := fmt.Sprintf("first%d:", round) // a brand-new set: no markers
		markerKey := keyspace.Layout{Prefix: prefix, Cluster: true}.Marker(prefix + "{b}")
		maker := func(i int) string {
			s, _, _ := strings.Cut(primaries[i].Client(t).Get(t.Context(), markerKey).Val(), ":")
			return s
		}
		fresh := func() *redlock.Redlock {
			return newSet(t, clusterClients(t, clusters), redlock.WithKeyPrefix(prefix),
				redlock.WithNodeTimeout(time.Second), redlock.WithRestartQuarantine(freshQuarantine))
		}
		rs := fresh()
		first := rs.NewMutex("{a}first", mutex.WithTTL(freshQuarantine))
		require.NoError(t, first.TryLockContext(t.Context()), "round %d", round)
		require.NoError(t, first.UnlockContext(t.Context()))
		first.Settle()
		require.NoError(t, lockAtOnce(t, 16, "{b}", rs, fresh()), "round %d", round)
		for i := range primaries {
			require.Equal(t, maker(0), maker(i), "round %d: Cluster %d's marker of the slot", round, i)
		}
		m := fresh().NewMutex("{b}next", mutex.WithTTL(freshQuarantine))
		require.NoError(t, m.TryLockContext(t.Context()), "round %d: a process meeting the shards next", round)
		require.NoError(t, m.UnlockContext(t.Context()))
	}
}

// A set mixing plain and Cluster nodes keeps the restart marker per slot on
// every node, and a plain node's client remembers it per slot too: locks of
// names on each shard go on with no restart in sight (the client used to
// keep one marker per plain node, read every new slot's as a changed one,
// and quarantined both plain nodes for "lost its data" at each lock, with
// no end). A plain node restarted empty is still kept out, slot by slot.
func TestMixedSetQuarantinesOnlyARestart(t *testing.T) {
	cluster := redistest.StartClusters(t, 1, 3, 0)[0]
	plain := redistest.Start(t, 2)
	agedPast(t, freshQuarantine, append(slices.Clone(cluster.Primaries), plain...)...)
	clients := func() []redis.UniversalClient {
		return append(clusterClients(t, []*redistest.Cluster{cluster}), redistest.Clients(t, plain)...)
	}
	opts := []redlock.Option{redlock.WithKeyPrefix("mixed:"), redlock.WithNodeTimeout(time.Second), redlock.WithRestartQuarantine(freshQuarantine)}
	rs := newSet(t, clients(), opts...)
	var names []string // one per shard
	for i := 0; len(names) < 3 && i < 100; i++ {
		if name := fmt.Sprint("n", i); !slices.ContainsFunc(names, func(o string) bool { return cluster.Shard(o) == cluster.Shard(name) }) {
			names = append(names, name)
		}
	}
	require.Len(t, names, 3)
	for round := range 2 {
		for _, name := range names {
			m := rs.NewMutex(name, mutex.WithTTL(freshQuarantine))
			require.NoError(t, m.TryLockContext(t.Context()), "round %d, %s: no node restarted", round, name)
			require.NoError(t, m.UnlockContext(t.Context()))
		}
	}
	held := rs.NewMutex(names[0], mutex.WithTTL(freshQuarantine))
	require.NoError(t, held.LockContext(t.Context()))
	for _, s := range plain {
		s.RestartEmpty()
	}
	for _, name := range names {
		err := rs.NewMutex(name, mutex.WithTTL(freshQuarantine)).TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrQuarantined, "%s: both plain nodes restarted empty", name)
		assert.Equal(t, 2, quarantined(err), name)
	}
}
