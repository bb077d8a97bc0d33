package mutex_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/slot"
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
	sl, from := slot.Of(name), clusters[0].Shard(name)
	to := (from + 1) % 3

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var holders atomic.Int32
	var lastToken atomic.Uint64
	var acquired, violations atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 4 {
		set := []*redlock.Redlock{rs, other}[c%2]
		wg.Go(func() {
			for i := 0; i < 2000; i++ { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				m := set.NewMutex(name, mutex.WithTTL(5*time.Second), mutex.WithFencing())
				actx, acancel := context.WithTimeout(ctx, 2*time.Second)
				err := m.LockContext(actx)
				acancel()
				if err != nil {
					continue
				}
				if holders.Add(1) != 1 {
					violations.Add(1)
				}
				if tok := m.FencingToken(); tok <= lastToken.Load() {
					violations.Add(1)
				} else {
					lastToken.Store(tok)
				}
				acquired.Add(1)
				time.Sleep(time.Millisecond) // the work under the lock
				holders.Add(-1)
				_ = m.UnlockContext(ctx)
			}
		})
	}
	waitFor := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for acquired.Load() < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond) // progress has no signal but the counter
		}
		require.GreaterOrEqual(t, acquired.Load(), n, "contention goes on")
	}
	waitFor(20)
	clusters[0].MoveSlot(t, sl, from, to, 100*time.Millisecond)
	clusters[1].MoveSlot(t, sl, from, to, 100*time.Millisecond)
	waitFor(acquired.Load() + 20)
	clusters[0].MoveSlot(t, sl, to, from, 100*time.Millisecond)
	waitFor(acquired.Load() + 20)
	close(stop)
	wg.Wait()
	mu.Lock()
	t.Logf("%d acquisitions through three slot moves; node errors by type: %v", acquired.Load(), failures)
	assert.Positive(t, failures["TRYAGAIN"], "the moves split the slot under the lock's scripts")
	mu.Unlock()
	assert.Zero(t, violations.Load(), "two holders at once, or a fencing token not above the last")

	m := rs.NewMutex(name, mutex.WithFencing())
	require.NoError(t, m.LockContext(ctx))
	assert.Greater(t, m.FencingToken(), lastToken.Load())
	for _, c := range clusters[1:2] {
		assert.Equal(t, m.Value(), c.Primaries[to].Do(t, "GET", name), "the key is on the shard the slot moved to")
	}
	require.NoError(t, m.UnlockContext(ctx))
}
