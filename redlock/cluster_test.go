package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Every primitive and option on nodes that are Redis Clusters (3 Clusters
// of 3 primaries, one set of servers for every case): each case would hang
// or fail on CROSSSLOT if a script's keys left the lock key's slot. The
// election: one leader at a time, handed over on Resign by its
// notification, each leadership's fencing token above the last, observed
// from a set that never campaigns.
func TestClusterNodesRunEveryPrimitive(t *testing.T) {
	start := time.Now()
	clusters := redistest.StartClusters(t, 3, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	t.Logf("3 Clusters of 3 primaries started in %v", time.Since(start))
	clients := func() []redis.UniversalClient {
		return redistest.ClusterClients(t, clusters, func(o *redis.ClusterOptions) {
			o.MaxRetries, o.MaxRedirects, o.DialerRetries, o.DialTimeout = -1, -1, 1, time.Second
		})
	}
	newSet := func(opts ...redlock.Option) *redlock.Redlock {
		rs, err := redlock.New(clients(), append([]redlock.Option{redlock.WithNodeTimeout(300 * time.Millisecond)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rs.Close() })
		return rs
	}
	a, b := newSet(), newSet() // two processes
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"mutex", func(t *testing.T) {
			m := a.NewMutex("orders:1", mutex.WithFencing())
			require.NoError(t, m.LockContext(ctx))
			err := b.NewMutex("orders:1").TryLockContext(ctx)
			require.ErrorIs(t, err, mutex.ErrNotObtained)
			require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "held, not a node failure")
			a.Settle() // LockContext returns at a majority: the last Cluster's acquire too
			for _, c := range clusters {
				assert.Equal(t, m.Value(), c.Primaries[c.Shard("orders:1")].Do(t, "GET", "orders:1"), "held on every Cluster's shard")
			}
			require.NoError(t, m.UnlockContext(ctx))
			require.NoError(t, b.NewMutex("orders:1").TryLockContext(ctx), "free once released")
		}},
		{"semaphore", func(t *testing.T) {
			var permits []*mutex.Permit
			for range 2 {
				p, err := a.NewSemaphore("exports", 2).TryAcquireContext(ctx)
				require.NoError(t, err)
				permits = append(permits, p)
			}
			_, err := b.NewSemaphore("exports", 2).TryAcquireContext(ctx)
			require.ErrorIs(t, err, mutex.ErrNotObtained, "at most 2 permits")
			require.NoError(t, permits[0].ReleaseContext(ctx))
			p, err := b.NewSemaphore("exports", 2).TryAcquireContext(ctx)
			require.NoError(t, err)
			require.NoError(t, p.ReleaseContext(ctx))
			require.NoError(t, permits[1].ReleaseContext(ctx))
		}},
		{"rwmutex", func(t *testing.T) {
			r1, r2 := a.NewRWMutex("doc", mutex.WithFencing()), b.NewRWMutex("doc")
			require.NoError(t, r1.RLockContext(ctx))
			require.NoError(t, r2.RLockContext(ctx), "readers share")
			w := b.NewRWMutex("doc", mutex.WithFencing())
			require.ErrorIs(t, w.TryLockContext(ctx), mutex.ErrNotObtained, "a writer waits for readers")
			require.NoError(t, r1.RUnlockContext(ctx))
			require.NoError(t, r2.RUnlockContext(ctx))
			require.NoError(t, w.TryLockContext(ctx))
			assert.Greater(t, w.FencingToken(), r1.FencingToken())
			require.NoError(t, w.UnlockContext(ctx))
		}},
		{"multi-name", func(t *testing.T) {
			m := a.NewMultiMutex([]string{"{acct}:7", "{acct}:3"}, mutex.WithFencing())
			require.NoError(t, m.LockContext(ctx))
			require.ErrorIs(t, b.NewMutex("{acct}:3").TryLockContext(ctx), mutex.ErrNotObtained, "each name excluded")
			require.NoError(t, m.UnlockContext(ctx))
			single := b.NewMutex("{acct}:3", mutex.WithFencing())
			require.NoError(t, single.TryLockContext(ctx))
			assert.Greater(t, single.FencingToken(), m.FencingToken(), "one counter for the slot")
			require.NoError(t, single.UnlockContext(ctx))
		}},
		{"lease", func(t *testing.T) {
			m := a.NewMutex("lease", mutex.WithTTL(300*time.Millisecond), mutex.WithAutoExtend(), mutex.WithFencing())
			require.NoError(t, m.LockContext(ctx))
			select {
			case <-m.Lost():
				t.Fatalf("lease lost: %v", m.LostCause())
			case <-time.After(time.Second): // three TTLs
			}
			require.ErrorIs(t, b.NewMutex("lease").TryLockContext(ctx), mutex.ErrNotObtained, "still held after 3 TTLs")
			require.NoError(t, m.UnlockContext(ctx))
		}},
		{"notification", func(t *testing.T) {
			held := a.NewMutex("notified", mutex.WithTTL(30*time.Second))
			require.NoError(t, held.LockContext(ctx))
			waiter := b.NewMutex("notified", mutex.WithRetryDelay(10*time.Second, 10*time.Second))
			got := make(chan error, 1)
			go func() { got <- waiter.LockContext(ctx) }()
			require.Eventually(t, func() bool { return b.Waiting("notified") == 1 }, 5*time.Second, 5*time.Millisecond)
			require.NoError(t, held.UnlockContext(ctx))
			released := time.Now()
			select {
			case err := <-got:
				require.NoError(t, err)
				t.Logf("woken %v after the release", time.Since(released))
			case <-time.After(2 * time.Second):
				t.Fatal("the waiter was not woken by the release (its fallback is 10s)")
			}
			require.NoError(t, waiter.UnlockContext(ctx))
		}},
		{"inspect and force unlock", func(t *testing.T) {
			m := a.NewMutex("stuck", mutex.WithFencing())
			require.NoError(t, m.LockContext(ctx))
			in, err := b.Inspect(ctx, "stuck")
			require.NoError(t, err)
			require.Len(t, in.Locks, 1)
			assert.Equal(t, m.Value(), in.Locks[0].Holder)
			assert.Equal(t, m.FencingToken()+8, in.Fence, "the counter ends the block reserved for passes")
			ev, err := b.ForceUnlock(ctx, "stuck")
			require.NoError(t, err)
			assert.Equal(t, []string{"stuck"}, ev.Removed)
			assert.Greater(t, ev.Fence, m.FencingToken())
			next := b.NewMutex("stuck", mutex.WithFencing())
			require.NoError(t, next.TryLockContext(ctx))
			assert.Greater(t, next.FencingToken(), ev.Fence, "later holders above the forced unlock")
			require.ErrorIs(t, m.UnlockContext(ctx), mutex.ErrNotHeld)
			require.NoError(t, next.UnlockContext(ctx))
		}},
		{"idempotency", func(t *testing.T) {
			runs := 0
			fn := func(ctx context.Context) ([]byte, error) {
				runs++
				assert.NotZero(t, idempotency.FencingToken(ctx))
				return []byte("charged"), nil
			}
			resp, replayed, err := idempotency.New(a).Do(ctx, "pay-1", []byte("req"), fn)
			require.NoError(t, err)
			assert.False(t, replayed)
			resp2, replayed, err := idempotency.New(b).Do(ctx, "pay-1", []byte("req"), fn)
			require.NoError(t, err)
			assert.True(t, replayed)
			assert.Equal(t, resp, resp2)
			assert.Equal(t, 1, runs)
		}},
		{"election", func(t *testing.T) {
			// Two candidates in two node sets, and an observer in a third
			// that never campaigns. The waiting candidate retries only every
			// 10s: only the release's notification hands over at once.
			opts := []mutex.Option{mutex.WithTTL(time.Second), mutex.WithRetryDelay(10*time.Second, 10*time.Second)}
			ea, eb, watcher := a.NewElection("sched", opts...), b.NewElection("sched", opts...), newSet().NewElection("sched")
			_, err := watcher.Leader(ctx)
			require.ErrorIs(t, err, mutex.ErrNoLeader)
			obsCtx, stopObserving := context.WithCancel(ctx)
			defer stopObserving()
			observed := watcher.Observe(obsCtx)
			awaitLeader := func(value string) mutex.Leader {
				t.Helper()
				for {
					select {
					case l, ok := <-observed:
						require.True(t, ok, "Observe ended before %q led", value)
						if l.Value == value {
							return l
						}
					case <-time.After(5 * time.Second):
						require.FailNow(t, "not observed within 5s", "leader %q", value)
					}
				}
			}

			require.NoError(t, ea.Campaign(ctx, "host-a"))
			la, err := watcher.Leader(ctx)
			require.NoError(t, err)
			assert.Equal(t, "host-a", la.Value)
			assert.Equal(t, ea.FencingToken(), la.FencingToken)
			assert.Equal(t, la, awaitLeader("host-a"))
			for _, c := range clusters {
				assert.NotEmpty(t, c.Primaries[c.Shard("sched")].Do(t, "GET", "sched"), "held on every Cluster's shard")
			}

			won := make(chan error, 1)
			go func() { won <- eb.Campaign(ctx, "host-b") }()
			require.NoError(t, ea.Proclaim(ctx, "host-a:v2"))
			assert.Equal(t, la.FencingToken, awaitLeader("host-a:v2").FencingToken, "a proclamation keeps the token")
			select {
			case err := <-won:
				require.FailNow(t, "b leads beside a", "%v", err)
			default:
			}

			require.NoError(t, ea.Resign(ctx))
			resigned := time.Now()
			select {
			case <-ea.Done():
			case <-time.After(5 * time.Second):
				require.FailNow(t, "Done still open 5s after Resign")
			}
			select {
			case err := <-won:
				require.NoError(t, err)
				t.Logf("handed over %v after the resignation", time.Since(resigned))
			case <-time.After(2 * time.Second):
				require.FailNow(t, "the candidate was not woken by the resignation (its retry is 10s)")
			}
			lb := awaitLeader("host-b")
			assert.Greater(t, lb.FencingToken, la.FencingToken, "each leadership's token above the last")
			assert.Equal(t, eb.FencingToken(), lb.FencingToken)
			require.ErrorIs(t, ea.Proclaim(ctx, "late"), mutex.ErrNotHeld)

			require.NoError(t, eb.Resign(ctx))
			_, err = watcher.Leader(ctx)
			require.ErrorIs(t, err, mutex.ErrNoLeader)
			require.NoError(t, ea.Campaign(ctx, "host-a:back"))
			assert.Greater(t, awaitLeader("host-a:back").FencingToken, lb.FencingToken)
			require.NoError(t, ea.Resign(ctx))
		}},
		{"from URLs, and Check", func(t *testing.T) {
			var urls []string
			for _, c := range clusters {
				a := c.Addrs()
				urls = append(urls, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2])
			}
			rs, err := redlock.NewFromURLs(ctx, urls)
			require.NoError(t, err)
			defer rs.Close()
			assert.Equal(t, urls, rs.Nodes())
			m := rs.NewMutex("from-urls", mutex.WithFencing())
			require.NoError(t, m.LockContext(ctx))
			require.ErrorIs(t, a.NewMutex("from-urls").TryLockContext(ctx), mutex.ErrNotObtained, "the same Clusters")
			require.NoError(t, m.UnlockContext(ctx))
			rep, err := rs.Check(ctx)
			require.NoError(t, err)
			shards := map[string]bool{}
			for _, f := range rep.Findings {
				if f.Setting == "appendonly" && f.Node == urls[1] {
					shards[f.Shard] = true
				}
			}
			assert.Len(t, shards, 3, "each shard of node 1 named:\n%s", rep)
		}},
		{"a slot not served (CLUSTERDOWN) fails that node only", func(t *testing.T) {
			const name = "unserved"
			sl := keyspace.Slot(name)
			unserve := func(c *redistest.Cluster) { // the owner gives the slot up, and every node forgets it
				owner := c.Shard(name)
				c.Primaries[owner].Do(t, "CLUSTER", "DELSLOTS", sl)
				for i, s := range c.Primaries {
					if i != owner {
						s.Do(t, "CLUSTER", "DELSLOTS", sl)
					}
				}
			}
			unserve(clusters[0])
			m := a.NewMutex(name)
			require.NoError(t, m.TryLockContext(ctx), "2 of 3 Clusters serve the slot")
			err := b.NewMutex(name).TryLockContext(ctx)
			require.ErrorIs(t, err, mutex.ErrNotObtained, "held by a")
			require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "a majority answered: held, not an outage")
			require.NoError(t, m.UnlockContext(ctx))
			unserve(clusters[1])
			err = b.NewMutex(name).TryLockContext(ctx)
			require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "2 of 3 Clusters do not serve the slot")
			var ne *mutex.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Contains(t, ne.Node, "cluster[")
			assert.Contains(t, err.Error(), "CLUSTERDOWN")
			other := b.NewMutex("served")
			require.NotEqual(t, sl, keyspace.Slot("served"))
			require.NoError(t, other.TryLockContext(ctx), "the other slots lock as usual")
			require.NoError(t, other.UnlockContext(ctx))
			for _, c := range clusters[:2] { // served again
				c.Primaries[c.Shard(name)].Do(t, "CLUSTER", "ADDSLOTS", sl)
			}
		}},
		{"a shard down fails that node, for its slots only", func(t *testing.T) {
			c1, c2 := clusters[1], clusters[2]
			c2.Primaries[c2.Shard("down")].Kill()
			m := a.NewMutex("down")
			require.NoError(t, m.LockContext(ctx), "2 of 3 Clusters answer")
			c1.Primaries[c1.Shard("down")].Kill()
			err := b.NewMutex("down").TryLockContext(ctx)
			require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
			var ne *mutex.NodeError
			require.ErrorAs(t, err, &ne)
			assert.Contains(t, ne.Node, "cluster[")
			others := 0
			for _, name := range []string{"up-0", "up-1", "up-2", "up-3", "up-4", "up-5"} {
				if c1.Shard(name) != c1.Shard("down") && c2.Shard(name) != c2.Shard("down") {
					others++
					other := b.NewMutex(name)
					require.NoError(t, other.TryLockContext(ctx), "%s: its shards are up", name)
					require.NoError(t, other.UnlockContext(ctx))
				}
			}
			assert.Positive(t, others, "names on other shards were tried")
			require.ErrorIs(t, m.UnlockContext(ctx), mutex.ErrNodesUnavailable, "its release too needs the shards")
		}},
	} {
		if !t.Run(tc.name, tc.run) {
			return
		}
	}
}
