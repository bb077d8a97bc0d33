package redlock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
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

// What Cluster nodes need of names, a semaphore's limit and the operator's
// calls, on one set of 3 Clusters of 3 primaries: names that braces cannot
// tag ("a}b", an empty "{}", a key prefix "svc}:") lock with every
// primitive, at once (a script whose keys left the key's slot would answer
// CROSSSLOT until the deadline); a semaphore with another limit is refused;
// Inspect and ForceUnlock find a semaphore's permits; and ForceUnlock leaves
// both slots' counters of a name at the number it reports.
func TestClusterNodesNamesLimitsAndAdmin(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))
	newSet := func(opts ...redlock.Option) *redlock.Redlock {
		clients := redistest.ClusterClients(t, clusters, func(o *redis.ClusterOptions) {
			o.MaxRetries, o.MaxRedirects, o.DialerRetries, o.DialTimeout = -1, -1, 1, time.Second
		})
		rs, err := redlock.New(clients, append([]redlock.Option{redlock.WithNodeTimeout(300 * time.Millisecond)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rs.Close() })
		return rs
	}
	a, b := newSet(), newSet()
	pa, pb := newSet(redlock.WithKeyPrefix("svc}:")), newSet(redlock.WithKeyPrefix("svc}:"))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// quick is the context of one call that must not wait: a retried
	// CROSSSLOT shows as its deadline.
	quick := func() context.Context {
		c, stop := context.WithTimeout(ctx, 3*time.Second)
		t.Cleanup(stop)
		return c
	}

	t.Run("every name locks", func(t *testing.T) {
		for _, tc := range []struct {
			prefix, name string
			a, b         *redlock.Redlock
		}{{"", "a}b", a, b}, {"", "lock:{}", a, b}, {"", "{}x", a, b}, {"", "x{y}z", a, b}, {"svc}:", "x", pa, pb}} {
			t.Run(tc.prefix+tc.name, func(t *testing.T) {
				name, a, b := tc.name, tc.a, tc.b
				m := a.NewMutex(name, mutex.WithFencing(), mutex.WithMetadata("job=7"))
				require.NoError(t, m.TryLockContext(quick()))
				err := b.NewMutex(name).TryLockContext(quick())
				require.ErrorIs(t, err, mutex.ErrNotObtained)
				require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "held, not a node failure")
				in, err := b.Inspect(quick(), name)
				require.NoError(t, err)
				require.NotEmpty(t, in.Locks)
				assert.Equal(t, m.Value(), in.Locks[0].Holder)
				assert.Equal(t, "job=7", in.Locks[0].Metadata)
				require.NoError(t, m.UnlockContext(quick()))

				rw, w := a.NewRWMutex(name), b.NewRWMutex(name)
				require.NoError(t, rw.RLockContext(quick()))
				require.ErrorIs(t, w.TryLockContext(quick()), mutex.ErrNotObtained, "a writer waits for the reader")
				require.NoError(t, rw.RUnlockContext(quick()))
				require.NoError(t, w.TryLockContext(quick()))
				require.NoError(t, w.UnlockContext(quick()))

				p, err := a.NewSemaphore(name, 1).TryAcquireContext(quick())
				require.NoError(t, err)
				_, err = b.NewSemaphore(name, 1).TryAcquireContext(quick())
				require.ErrorIs(t, err, mutex.ErrNotObtained)
				require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
				require.NoError(t, p.ReleaseContext(quick()))

				e := a.NewElection(name, mutex.WithTTL(time.Second))
				require.NoError(t, e.Campaign(quick(), "host-a"))
				l, err := b.NewElection(name).Leader(quick())
				require.NoError(t, err)
				assert.Equal(t, "host-a", l.Value)
				require.NoError(t, e.Resign(quick()))

				runs := 0
				fn := func(context.Context) ([]byte, error) { runs++; return []byte("done"), nil }
				_, replayed, err := idempotency.New(a).Do(quick(), "abc"+name, []byte("req"), fn)
				require.NoError(t, err)
				assert.False(t, replayed)
				_, replayed, err = idempotency.New(b).Do(quick(), "abc"+name, []byte("req"), fn)
				require.NoError(t, err)
				assert.True(t, replayed, "the record is found")
				assert.Equal(t, 1, runs)
			})
		}
	})

	t.Run("idempotency middleware", func(t *testing.T) {
		runs := 0
		h := idempotency.Middleware(idempotency.New(a))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			runs++
			_, _ = w.Write([]byte("charged"))
		}))
		for _, key := range []string{"abc}def", "{}", "order-{}-7"} {
			for i := range 2 {
				req := httptest.NewRequestWithContext(quick(), http.MethodPost, "/pay", strings.NewReader("req"))
				req.Header.Set(idempotency.KeyHeader, key)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				require.Equal(t, http.StatusOK, rec.Code, "%s: %s", key, rec.Body)
				assert.Equal(t, i == 1, rec.Header().Get(idempotency.ReplayedHeader) == "true", key)
			}
		}
		assert.Equal(t, 3, runs, "once per key")
	})

	t.Run("a semaphore with another limit is refused", func(t *testing.T) {
		for _, name := range []string{"exports", "{exp}orts", "ex}ports"} {
			var held []*mutex.Permit
			for range 3 {
				p, err := a.NewSemaphore(name, 3).TryAcquireContext(quick())
				require.NoError(t, err, name)
				held = append(held, p)
			}
			_, err := b.NewSemaphore(name, 5).TryAcquireContext(quick())
			require.ErrorIs(t, err, mutex.ErrInvalid, "%s: the nodes hold limit 3", name)
			_, err = b.NewSemaphore(name, 3).TryAcquireContext(quick())
			require.ErrorIs(t, err, mutex.ErrNotObtained, "%s: 3 of 3 held", name)
			for _, p := range held {
				require.NoError(t, p.ReleaseContext(quick()))
			}
		}
	})

	t.Run("inspect and force unlock find the permits", func(t *testing.T) {
		const name = "reports"
		var held []*mutex.Permit
		for range 2 {
			p, err := a.NewSemaphore(name, 3).TryAcquireContext(quick())
			require.NoError(t, err)
			held = append(held, p)
		}
		in, err := b.Inspect(quick(), name)
		require.NoError(t, err)
		require.Len(t, in.Locks, 2, "%s", in)
		for _, ls := range in.Locks {
			assert.Equal(t, "permit", ls.Kind)
			assert.NotEmpty(t, ls.Holder, "held on a majority:\n%s", in)
		}
		assert.NotContains(t, in.String(), "free")
		ev, err := b.ForceUnlock(quick(), name)
		require.NoError(t, err)
		assert.Len(t, ev.Removed, 2, "%s", ev)
		for range 3 {
			_, err := b.NewSemaphore(name, 3).TryAcquireContext(quick())
			require.NoError(t, err, "every permit free again")
		}
		require.ErrorIs(t, held[0].ReleaseContext(quick()), mutex.ErrNotHeld)
	})

	// Permits of any number: a limit of 5,000 gives 10 permits below 1,024 once in 10 million.
	t.Run("inspect and force unlock find permits past the first thousand", func(t *testing.T) {
		const name, limit = "uploads", 5000
		var held []*mutex.Permit
		for range 10 {
			p, err := a.NewSemaphore(name, limit).TryAcquireContext(quick())
			require.NoError(t, err)
			held = append(held, p)
		}
		in, err := b.Inspect(quick(), name)
		require.NoError(t, err)
		assert.Len(t, in.Locks, 10, "%s", in)
		ev, err := b.ForceUnlock(quick(), name)
		require.NoError(t, err)
		assert.Len(t, ev.Removed, 10, "%s", ev)
		for _, p := range held {
			require.ErrorIs(t, p.ReleaseContext(quick()), mutex.ErrNotHeld)
		}
	})

	t.Run("force unlock raises both slots to the number it reports", func(t *testing.T) {
		const name = "catalog"
		require.NotEqual(t, keyspace.Slot(name), keyspace.Slot(name+":quorumlock:rw"))
		m, w := a.NewMutex(name, mutex.WithFencing()), a.NewRWMutex(name, mutex.WithFencing())
		require.NoError(t, m.TryLockContext(quick()))
		require.NoError(t, m.UnlockContext(quick()))
		require.NoError(t, w.TryLockContext(quick()))
		ev, err := b.ForceUnlock(quick(), name)
		require.NoError(t, err)
		for _, key := range []string{name, name + ":quorumlock:rw"} {
			counter := "quorumlock:fence:{" + keyspace.SlotTag(keyspace.Slot(key)) + "}"
			require.Equal(t, keyspace.Slot(key), keyspace.Slot(counter))
			for i, c := range clusters {
				got := c.Primaries[c.Shard(counter)].Do(t, "GET", counter)
				assert.Equal(t, strconv.FormatUint(ev.Fence, 10), got, "node %d: the counter of %s's slot", i, key)
			}
		}
	})
}
