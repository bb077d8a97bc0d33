package mutex_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// All names or none: a multi-name lock refused because one of its names is
// held takes none of the others, holds all of them when it succeeds (a
// Mutex on any of them is refused), and its release frees all of them.
func TestMultiMutexAllOrNothing(t *testing.T) {
	b := realBackend(t, 3)
	one := b.set(t).NewMutex("acct:3")
	require.NoError(t, one.LockContext(t.Context()))

	transfer := b.set(t).NewMultiMutex([]string{"acct:7", "acct:3"})
	err := transfer.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "held, not unavailable")
	transfer.Settle()
	assert.Zero(t, b.present(t, "acct:7"), "a refused attempt took a name")

	require.NoError(t, one.UnlockContext(t.Context()))
	require.NoError(t, transfer.TryLockContext(t.Context()))
	for _, name := range []string{"acct:3", "acct:7"} {
		assert.GreaterOrEqual(t, b.holders(t, name, transfer.Value()), 2, "%s held on a majority", name)
		require.ErrorIs(t, b.set(t).NewMutex(name).TryLockContext(t.Context()), mutex.ErrNotObtained, "a Mutex on %s", name)
	}
	require.NoError(t, transfer.UnlockContext(t.Context()))
	transfer.Settle()
	for _, name := range []string{"acct:3", "acct:7"} {
		assert.Zero(t, b.present(t, name), "%s left behind", name)
	}
}

// Atomic per node: where one name is held by another owner, the node takes
// none of the names, and the nodes that took them all are rolled back.
func TestMultiMutexPartialGrantIsRolledBack(t *testing.T) {
	b := realBackend(t, 3)
	for _, i := range []int{1, 2} { // another owner holds b on nodes 1 and 2
		require.NoError(t, b.admin[i].Set(t.Context(), "b", "someone-else", time.Minute).Err())
	}
	m := b.set(t).NewMultiMutex([]string{"a", "b"})
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrNotObtained)
	m.Settle()
	assert.Zero(t, b.present(t, "a"), "a was left behind")
	assert.Empty(t, b.get(t, 0, "b"), "b was left behind on node 0")
	assert.Equal(t, 2, b.holders(t, "b", "someone-else"), "the other owner's keys are untouched")
}

// Callers locking overlapping names in opposite orders, and Mutexes on
// single names, never deadlock and never hold a name twice: 8 callers of
// separate Redlocks, 12 turns each.
func TestMultiMutexOppositeOrdersNeverDeadlockOrOverlap(t *testing.T) {
	b := realBackend(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a"}, {"a", "b", "c"}, {"a"}, {"c"}, {"c", "b"}}
	holders := map[string]*atomic.Int64{"a": {}, "b": {}, "c": {}}
	var overlaps, turns atomic.Int64
	var wg sync.WaitGroup
	for _, names := range sets {
		m := b.set(t).NewMultiMutex(names)
		wg.Go(func() {
			for range 12 {
				if !assert.NoError(t, m.LockContext(ctx), "%v", names) {
					return
				}
				for _, n := range names {
					if holders[n].Add(1) > 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Millisecond) // the work
				for _, n := range names {
					holders[n].Add(-1)
				}
				turns.Add(1)
				assert.NoError(t, m.UnlockContext(ctx))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "a name was held twice at once")
	assert.Equal(t, int64(12*len(sets)), turns.Load(), "every caller had every turn")
}

// A multi-name lease keeps every name renewed, and is lost when a majority
// loses one of its names.
func TestMultiMutexLease(t *testing.T) {
	b := realBackend(t, 3)
	const ttl = 300 * time.Millisecond
	m := b.set(t).NewMultiMutex([]string{"x", "y"}, mutex.WithTTL(ttl), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	held := time.NewTimer(4 * ttl)
	defer held.Stop()
	select {
	case <-m.Lost():
		t.Fatalf("lost while renewed: %v", m.LostCause())
	case <-held.C:
	}
	for _, name := range []string{"x", "y"} {
		assert.GreaterOrEqual(t, b.holders(t, name, m.Value()), 2, "%s still held after %v", name, 4*ttl)
	}
	for _, i := range []int{0, 1, 2} { // y vanishes everywhere, as in an eviction
		require.NoError(t, b.admin[i].Del(t.Context(), "y").Err())
	}
	select {
	case <-m.Lost():
		require.ErrorIs(t, m.LostCause(), mutex.ErrNotHeld)
	case <-time.After(10 * ttl):
		t.Fatal("Lost never closed after a name was lost")
	}
	require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
}

// Fencing numbers of multi-name locks increase across holders, as a Mutex's.
func TestMultiMutexFencing(t *testing.T) {
	b := realBackend(t, 3)
	var last uint64
	for i := range 3 {
		m := b.set(t).NewMultiMutex([]string{"p", "q"}, mutex.WithFencing())
		require.NoError(t, m.LockContext(t.Context()))
		assert.Greater(t, m.FencingToken(), last, "holder %d", i)
		last = m.FencingToken()
		require.NoError(t, m.UnlockContext(t.Context()))
	}
}

// Bad input is ErrInvalid and sends nothing; on a Cluster every name needs
// the same hash tag.
func TestMultiMutexBadInput(t *testing.T) {
	b := realBackend(t, 1)
	rs := b.set(t)
	for name, m := range map[string]*mutex.Mutex{
		"no names":   rs.NewMultiMutex(nil),
		"empty list": rs.NewMultiMutex([]string{}),
		"empty name": rs.NewMultiMutex([]string{"a", ""}),
		"duplicate":  rs.NewMultiMutex([]string{"a", "b", "a"}),
		"reserved":   rs.NewMultiMutex([]string{"a", "b:quorumlock:q"}),
		"bad TTL":    rs.NewMultiMutex([]string{"a", "b"}, mutex.WithTTL(0)),
		"nil set":    (*redlock.Redlock)(nil).NewMultiMutex([]string{"a", "b"}),
	} {
		require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrInvalid, name)
		require.ErrorIs(t, m.LockContext(t.Context()), mutex.ErrInvalid, name)
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrInvalid, name)
	}
	assert.Contains(t, rs.NewMultiMutex(nil).TryLockContext(t.Context()).Error(), "no names")
	keys, err := b.admin[0].Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "nothing written")
	many := make([]string, mutex.MaxNames+1)
	for i := range many {
		many[i] = fmt.Sprint("n", i)
	}
	err = rs.NewMultiMutex(many).TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrInvalid)
	assert.Less(t, len(err.Error()), 200, "the error does not list the names")
	ok := rs.NewMultiMutex(many[:mutex.MaxNames])
	start := time.Now()
	require.NoError(t, ok.TryLockContext(t.Context()))
	t.Logf("%d names locked in %v", mutex.MaxNames, time.Since(start))
	require.NoError(t, ok.UnlockContext(t.Context()))

	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	cs := newSet(t, []redis.UniversalClient{cluster})
	err = cs.NewMultiMutex([]string{"orders:7", "orders:3"}).TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrInvalid)
	assert.Contains(t, err.Error(), "hash tag")
	assert.Contains(t, err.Error(), `"orders:3" and "orders:7"`, "names the two names")
	err = cs.NewMultiMutex([]string{"{a}:1", "{a}:2", "{b}:3"}).TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrInvalid)
	assert.Contains(t, err.Error(), `"{a}:1" and "{b}:3"`, "names the two differing names")
	tagged := cs.NewMultiMutex([]string{"{orders}:7", "{orders}:3"}, mutex.WithTTL(time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	assert.NotErrorIs(t, tagged.TryLockContext(ctx), mutex.ErrInvalid, "one hash tag is accepted (the node is down)")
}

// One name is a plain Mutex on it.
func TestMultiMutexOfOneNameIsAMutex(t *testing.T) {
	b := realBackend(t, 3)
	m := b.set(t).NewMultiMutex([]string{"solo"})
	require.NoError(t, m.LockContext(t.Context()))
	assert.Equal(t, "solo", m.Name())
	assert.GreaterOrEqual(t, b.holders(t, "solo", m.Value()), 2)
	require.ErrorIs(t, b.set(t).NewMutex("solo").TryLockContext(t.Context()), mutex.ErrNotObtained)
	require.NoError(t, m.UnlockContext(t.Context()))
}

// Leases of every kind share the renewer: 100 multi-name locks of 3 names
// (300 keys: more than one script call per node), 100 read holds and 100
// Mutexes on one set stay held through 4 renewals, then release every key.
func TestLeasesOfEveryKindRenewTogether(t *testing.T) {
	const each, ttl = 100, 2 * time.Second
	b := realBackend(t, 3)
	rs := b.set(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	opts := []mutex.Option{mutex.WithTTL(ttl), mutex.WithAutoExtend()}
	var held []interface {
		Lost() <-chan struct{}
		LostCause() error
	}
	var release []func(context.Context) error
	for i := range each {
		m := rs.NewMultiMutex([]string{fmt.Sprint("m", i, ":a"), fmt.Sprint("m", i, ":b"), fmt.Sprint("m", i, ":c")}, opts...)
		require.NoError(t, m.LockContext(ctx))
		rw := rs.NewRWMutex(fmt.Sprint("rw", i), opts...)
		require.NoError(t, rw.RLockContext(ctx))
		one := rs.NewMutex(fmt.Sprint("one", i), opts...)
		require.NoError(t, one.LockContext(ctx))
		held = append(held, m, rw, one)
		release = append(release, m.UnlockContext, rw.RUnlockContext, one.UnlockContext)
	}
	time.Sleep(3 * ttl / 2) // the renewals run in the background; nothing signals a round
	for _, h := range held {
		require.NoError(t, h.LostCause(), "a lease was lost")
	}
	for _, r := range release {
		require.NoError(t, r(ctx))
	}
	rs.NewMutex("settle").Settle()
	for i, c := range b.admin {
		keys, err := c.Keys(ctx, "*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			assert.True(t, strings.Contains(k, ":quorumlock:rel:"), "node %d: %s left behind", i, k)
		}
	}
}

// A Mutex queued behind a multi-name lock that waits for another of its
// names is woken when the multi-name lock gives up, whether its ctx ends or
// its last try is refused: the name they share is free. Each caller has a
// Redlock of its own, as separate processes do; the Mutex's fallback look
// comes after 10s to 20s, so only a message can wake it within 5s.
func TestMutexBehindAMultiMutexThatGivesUpIsWoken(t *testing.T) {
	for _, how := range []string{"ctx ends", "last try"} {
		t.Run(how, func(t *testing.T) {
			b := realBackend(t, 3)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			holder := b.set(t).NewMutex("b", mutex.WithTTL(time.Minute))
			require.NoError(t, holder.LockContext(ctx))

			ms := b.set(t)
			mctx, stop := context.WithCancel(ctx)
			defer stop()
			opts := []mutex.Option{mutex.WithRetryDelay(time.Millisecond, 20*time.Second)}
			if how == "last try" {
				// Its second and last try comes when the Mutex's refused
				// attempt tells it that "a" is free (or at its fallback
				// look, in 2s to 4s).
				opts = []mutex.Option{mutex.WithTries(2), mutex.WithRetryDelay(time.Millisecond, 4*time.Second)}
			}
			multi := ms.NewMultiMutex([]string{"a", "b"}, opts...)
			gaveUp := make(chan error, 1)
			go func() { gaveUp <- multi.LockContext(mctx) }()
			require.Eventually(t, func() bool { return ms.Waiting("a") == 1 }, 10*time.Second, time.Millisecond, "the multi-name lock waits")

			// The Mutex's Redlock is subscribed before the Mutex comes:
			// the tell its first attempt sends to the multi-name lock may
			// make that one's last try at once.
			as := b.set(t)
			require.NoError(t, b.set(t).NewMutex("busy", mutex.WithTTL(time.Minute)).LockContext(ctx))
			subscribed, unsubscribe := context.WithCancel(ctx)
			defer unsubscribe()
			go func() { _ = as.NewMutex("busy").LockContext(subscribed) }()
			require.Eventually(t, func() bool {
				return pubsubConns(t, b, 0) == 2 && pubsubConns(t, b, 1) == 2 && pubsubConns(t, b, 2) == 2
			}, 10*time.Second, time.Millisecond, "both Redlocks subscribed on every node")
			// Limited tries: the look again that a new subscription
			// brings is not taken, so only the multi-name lock's leaving
			// can wake it.
			one := as.NewMutex("a", mutex.WithTries(100), mutex.WithRetryDelay(time.Millisecond, 20*time.Second))
			got := make(chan error, 1)
			go func() { got <- one.LockContext(ctx) }()
			require.Eventually(t, func() bool { return as.Waiting("a") == 1 || len(got) == 1 }, 10*time.Second, time.Millisecond, "the Mutex waits behind the multi-name lock")
			if how == "ctx ends" {
				stop()
			}
			require.ErrorIs(t, <-gaveUp, mutex.ErrNotObtained)
			requireWoken(t, got, "the Mutex was not woken when the multi-name lock ahead of it gave up")
			require.NoError(t, one.UnlockContext(ctx))
			require.NoError(t, holder.UnlockContext(ctx))
			unsubscribe()
		})
	}
}
