package redlock_test

import (
	"math"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// go-redis's pool probes a node that refused enough dials once a second
// until its client is closed, and ends only after its current sleep
// (TestClusterNodesRunEveryPrimitive kills shards).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func clientsFor(t *testing.T, n int) []redis.UniversalClient {
	t.Helper()
	redistest.SkipMiniredisInFIPSOnly(t)
	clients := make([]redis.UniversalClient, n)
	for i := range clients {
		c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

func TestNewRejectsBadNodeSets(t *testing.T) {
	three := clientsFor(t, 3)
	var nilClient *redis.Client
	sameAddr := redis.NewClient(&redis.Options{Addr: three[0].(*redis.Client).Options().Addr})
	t.Cleanup(func() { _ = sameAddr.Close() })
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	t.Cleanup(func() { _ = ring.Close() })
	clusterA := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7001", "127.0.0.1:7002"}})
	clusterA2 := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7002", "127.0.0.1:7003"}})
	seedOfA := redis.NewClient(&redis.Options{Addr: "127.0.0.1:7001"})
	for _, c := range []redis.UniversalClient{clusterA, clusterA2, seedOfA} {
		t.Cleanup(func() { _ = c.Close() })
	}
	tests := []struct {
		name    string
		clients []redis.UniversalClient
		opts    []redlock.Option
		want    string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"empty slice", []redis.UniversalClient{}, nil, "no nodes"},
		{"nil interface", []redis.UniversalClient{three[0], nil}, nil, "node 1 is a nil client"},
		{"typed nil", []redis.UniversalClient{nilClient, three[0]}, nil, "node 0 is a nil client"},
		{"same client twice", []redis.UniversalClient{three[0], three[1], three[0]}, nil, "nodes 0 and 2 are the same client"},
		{"same address twice", []redis.UniversalClient{three[0], sameAddr}, nil, "both connect to"},
		{"drift NaN", three, []redlock.Option{redlock.WithDriftFactor(math.NaN())}, "drift factor NaN"},
		{"drift negative", three, []redlock.Option{redlock.WithDriftFactor(-0.1)}, "drift factor -0.1"},
		{"drift 0.5", three, []redlock.Option{redlock.WithDriftFactor(0.5)}, "drift factor 0.5"},
		{"negative node timeout", three, []redlock.Option{redlock.WithNodeTimeout(-time.Second)}, "negative node timeout"},
		{"nil clock", three, []redlock.Option{redlock.WithClock(nil)}, "nil clock"},
		{"a Ring", []redis.UniversalClient{three[0], three[1], ring}, nil, "node 2 is a *redis.Ring: a Ring moves a held lock key to another shard"},
		{"one Cluster's seed twice", []redis.UniversalClient{three[0], clusterA, clusterA2}, nil, "nodes 1 and 2 both connect to 127.0.0.1:7002"},
		{"a Cluster's seed as a server", []redis.UniversalClient{clusterA, three[0], seedOfA}, nil, "nodes 0 and 2 both connect to 127.0.0.1:7001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := redlock.New(tt.clients, tt.opts...)
			require.ErrorIs(t, err, mutex.ErrInvalid)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, rs)
		})
	}
}

func TestNewAcceptsValidSets(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7} {
		rs, err := redlock.New(clientsFor(t, n), redlock.WithDriftFactor(0), redlock.WithNodeTimeout(time.Second))
		require.NoError(t, err)
		assert.Len(t, rs.Nodes(), n)
		assert.Equal(t, n/2+1, rs.Quorum())
	}
}

func TestErrorsAreTheSameValues(t *testing.T) {
	assert.Same(t, mutex.ErrNotObtained, mutex.ErrNotObtained)
	assert.Same(t, mutex.ErrNodesUnavailable, mutex.ErrNodesUnavailable)
	assert.Same(t, mutex.ErrNotHeld, mutex.ErrNotHeld)
	assert.Same(t, mutex.ErrInvalid, mutex.ErrInvalid)
}

func TestNodesAreNamedByAddress(t *testing.T) {
	clients := clientsFor(t, 2)
	rs, err := redlock.New(clients)
	require.NoError(t, err)
	assert.Equal(t, []string{
		clients[0].(*redis.Client).Options().Addr,
		clients[1].(*redis.Client).Options().Addr,
	}, rs.Nodes())
}
