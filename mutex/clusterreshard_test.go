package mutex_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Resharding under contention: while four contenders (two node sets) take
// and release a fenced lock in a loop, its slot migrates to another shard,
// key by key, on two of the three Clusters, and back on one. No two
// contenders ever hold it at once, fencing tokens strictly increase, and
// contention continues through the moves (ASK and TRYAGAIN answers are
// failures of those nodes only).
func TestClusterReshardingUnderContention(t *testing.T) {
	var mu sync.Mutex
	failures := map[string]int{} // node errors by type
	obs := redlock.WithObserver(&redlock.Observer{NodeError: func(e redlock.NodeFailure) {
		mu.Lock()
		defer mu.Unlock()
		failures[e.Type]++
	}})
	clusters, rs := clusterSet(t, 3, redlock.WithNodeTimeout(200*time.Millisecond), obs)
	other := newSet(t, clusterClients(t, clusters), redlock.WithNodeTimeout(200*time.Millisecond), obs)
	const name = "{resharded}:lock"
	sl, from := keyspace.Slot(name), clusters[0].Shard(name)
	to := (from + 1) % 3

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := contend(ctx, []*redlock.Redlock{rs, other}, name, mutex.WithTTL(5*time.Second), mutex.WithFencing())
	c.waitFor(t, 20)
	clusters[0].MoveSlot(t, sl, from, to, 100*time.Millisecond)
	clusters[1].MoveSlot(t, sl, from, to, 100*time.Millisecond)
	c.waitFor(t, c.acquired.Load()+20)
	clusters[0].MoveSlot(t, sl, to, from, 100*time.Millisecond)
	c.waitFor(t, c.acquired.Load()+20)
	c.end(t)
	mu.Lock()
	t.Logf("%d acquisitions through three slot moves; node errors by type: %v", c.acquired.Load(), failures)
	assert.Positive(t, failures["TRYAGAIN"], "the moves split the slot under the lock's scripts")
	mu.Unlock()

	m := rs.NewMutex(name, mutex.WithFencing())
	require.NoError(t, m.LockContext(ctx))
	assert.Greater(t, m.FencingToken(), c.last.Load())
	// The lock returns at a majority: the key is on the shard that owns the
	// slot now (moved on Cluster 1, moved back on 0, never moved on 2) on
	// at least a majority of the Clusters; the last grant may still be on
	// its way, or have failed on a stale slot map.
	owners := []int{from, to, from}
	on := 0
	for i, cl := range clusters {
		if v, ok := cl.Primaries[owners[i]].Do(t, "GET", name).(string); ok && v == m.Value() {
			on++
		}
	}
	assert.GreaterOrEqual(t, on, 2, "the key is on the shards that own its slot")
	require.NoError(t, m.UnlockContext(ctx))
}

// contention is contenders taking and releasing one lock in a loop, two
// per node set, with the oracles of the chaos suite: never two holders at
// once, fencing tokens strictly increasing.
type contention struct {
	acquired, violations atomic.Int64
	holders              atomic.Int32
	last                 atomic.Uint64
	stop                 chan struct{}
	wg                   sync.WaitGroup
}

// contend starts two contenders per set on name, each attempt bounded by
// 2s and each loop by 2,000 attempts.
func contend(ctx context.Context, sets []*redlock.Redlock, name string, opts ...mutex.Option) *contention {
	c := &contention{stop: make(chan struct{})}
	for k := range 2 * len(sets) {
		set := sets[k%len(sets)]
		c.wg.Go(func() {
			for range 2000 {
				select {
				case <-c.stop:
					return
				default:
				}
				m := set.NewMutex(name, opts...)
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := m.LockContext(actx)
				cancel()
				if err != nil {
					continue
				}
				if c.holders.Add(1) != 1 {
					c.violations.Add(1)
				}
				if tok := m.FencingToken(); tok <= c.last.Load() {
					c.violations.Add(1)
				} else {
					c.last.Store(tok)
				}
				c.acquired.Add(1)
				time.Sleep(time.Millisecond) // the work under the lock
				c.holders.Add(-1)
				_ = m.UnlockContext(ctx)
			}
		})
	}
	return c
}

// waitFor waits, at most 10s, until n acquisitions were made.
func (c *contention) waitFor(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.acquired.Load() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // progress has no signal but the counter
	}
	require.GreaterOrEqual(t, c.acquired.Load(), n, "contention goes on")
}

// end stops the contenders and checks the oracles.
func (c *contention) end(t *testing.T) {
	t.Helper()
	close(c.stop)
	c.wg.Wait()
	assert.Zero(t, c.violations.Load(), "two holders at once, or a fencing token not above the last")
}
