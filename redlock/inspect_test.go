package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The tests of Inspect and ForceUnlock run against three real redis-server
// processes; the holders and the operator use separate node sets, as
// separate processes would.

// lockOf returns the LockState of key in in, failing the test if absent.
func lockOf(t *testing.T, in *redlock.Inspection, key string) redlock.LockState {
	t.Helper()
	for _, ls := range in.Locks {
		if ls.Key == key {
			return ls
		}
	}
	require.FailNow(t, "no lock key "+key+" in the inspection", "%v", in)
	return redlock.LockState{}
}

// putRWLock writes a read-write lock's hash on servers as its layout has it:
// field w the writer's token (the key's TTL is the writer's), fields r:<token>
// each reader's expiry in the node's Unix milliseconds.
func putRWLock(t *testing.T, servers []*redistest.Server, key, writer string, ttl time.Duration, readers map[string]time.Duration) {
	t.Helper()
	now := time.Now()
	for _, s := range servers {
		if writer != "" {
			s.Do(t, "HSET", key, "w", writer)
		}
		for token, left := range readers {
			s.Do(t, "HSET", key, "r:"+token, strconv.FormatInt(now.Add(left).UnixMilli(), 10))
		}
		s.Do(t, "PEXPIRE", key, ttl.Milliseconds())
	}
}

func TestInspectShowsEachPrimitivesHolders(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := doSet(t, servers), doSet(t, servers)
	ctx := t.Context()

	m := holders.NewMutex("insp:m", mutex.WithTTL(time.Minute), mutex.WithFencing())
	require.NoError(t, m.LockContext(ctx))
	t.Cleanup(func() { _ = m.UnlockContext(context.Background()) })
	sem := holders.NewSemaphore("insp:s", 12, mutex.WithTTL(time.Minute))
	var permits []*mutex.Permit
	for range 2 {
		p, err := sem.AcquireContext(ctx)
		require.NoError(t, err)
		permits = append(permits, p)
	}
	t.Cleanup(func() {
		for _, p := range permits {
			_ = p.ReleaseContext(context.Background())
		}
	})
	putRWLock(t, servers, "insp:rw:quorumlock:rw", "W1", time.Minute, map[string]time.Duration{"R1": time.Minute, "R0": -time.Second})
	putRWLock(t, servers[:1], "insp:rw:quorumlock:rw", "", time.Minute, map[string]time.Duration{"R9": time.Minute})

	in, err := admin.Inspect(ctx, "insp:m")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1, "%v", in)
	ls := in.Locks[0]
	assert.Equal(t, "insp:m", ls.Key)
	assert.Equal(t, "mutex", ls.Kind)
	assert.Equal(t, m.Value(), ls.Holder)
	assert.Greater(t, ls.TTL, 50*time.Second)
	assert.LessOrEqual(t, ls.TTL, time.Minute)
	holding := 0
	for _, v := range ls.Values {
		require.NoError(t, v.Err)
		if v.Token == m.Value() {
			holding++
		}
	}
	assert.GreaterOrEqual(t, holding, 2)
	assert.GreaterOrEqual(t, in.Fence, m.FencingToken(), "the set's counter is at least the last token issued")
	assert.Equal(t, 2, in.Quorum)
	assert.Contains(t, in.String(), "insp:m (mutex): held by "+m.Value()+" on a majority")

	in, err = admin.Inspect(ctx, "insp:s")
	require.NoError(t, err)
	require.Len(t, in.Locks, 2, "one LockState per permit held: %v", in)
	for _, ls := range in.Locks {
		assert.Equal(t, "permit", ls.Kind)
		assert.True(t, strings.HasPrefix(ls.Key, "insp:s:quorumlock:permit:"), ls.Key)
		assert.Equal(t, servers[0].Do(t, "GET", ls.Key), ls.Holder, "the permit's token")
	}
	assert.NotEqual(t, in.Locks[0].Holder, in.Locks[1].Holder)

	in, err = admin.Inspect(ctx, "insp:rw")
	require.NoError(t, err)
	rw := lockOf(t, in, "insp:rw:quorumlock:rw")
	assert.Equal(t, "rwmutex", rw.Kind)
	assert.Equal(t, "W1", rw.Holder, "the writer")
	assert.Equal(t, []string{"R1"}, rw.Readers, "R0's expiry is past; R9 is on one node only")
	assert.Contains(t, rw.Values[0].Readers, "R9")
	assert.NotContains(t, rw.Values[0].Readers, "R0")
	assert.Contains(t, in.String(), "written by W1 on a majority")

	in, err = admin.Inspect(ctx, "insp:free")
	require.NoError(t, err)
	assert.Empty(t, in.Locks)
	assert.Contains(t, in.String(), "free")
}

// Inspect and ForceUnlock read and remove a real RWMutex's holds: readers
// are listed, a writer is the holder, and an evicted writer's lease is lost.
func TestInspectAndForceUnlockOfARealRWMutex(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := doSet(t, servers), doSet(t, servers)
	ctx := t.Context()
	readers := []*mutex.RWMutex{holders.NewRWMutex("real-rw"), holders.NewRWMutex("real-rw")}
	for _, r := range readers {
		require.NoError(t, r.RLockContext(ctx))
	}
	in, err := admin.Inspect(ctx, "real-rw")
	require.NoError(t, err)
	rw := lockOf(t, in, "real-rw"+keyspace.RWSuffix)
	assert.Empty(t, rw.Holder, "no writer")
	assert.Len(t, rw.Readers, 2, "%v", in)
	for _, r := range readers {
		require.NoError(t, r.RUnlockContext(ctx))
	}

	writer := holders.NewRWMutex("real-rw", mutex.WithTTL(time.Second), mutex.WithAutoExtend())
	require.NoError(t, writer.LockContext(ctx))
	in, err = admin.Inspect(ctx, "real-rw")
	require.NoError(t, err)
	assert.NotEmpty(t, lockOf(t, in, "real-rw"+keyspace.RWSuffix).Holder, "the writer")
	_, err = admin.ForceUnlock(ctx, "real-rw")
	require.NoError(t, err)
	select {
	case <-writer.Lost():
		require.ErrorIs(t, writer.LostCause(), mutex.ErrNotHeld)
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted writer's Lost never closed")
	}
	require.NoError(t, admin.NewRWMutex("real-rw").TryLockContext(ctx), "free after the forced unlock")
}

func TestInspectShowsADataKeyNamedLikeALock(t *testing.T) {
	servers := redistest.Start(t, 3)
	admin := doSet(t, servers)
	for _, s := range servers {
		s.Do(t, "RPUSH", "insp:list", "a")
	}
	in, err := admin.Inspect(t.Context(), "insp:list")
	require.NoError(t, err)
	ls := lockOf(t, in, "insp:list")
	assert.Empty(t, ls.Holder)
	for _, v := range ls.Values {
		assert.Equal(t, "list", v.Type)
	}
}

func TestInspectReportsFailedNodesPerNode(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := doSet(t, servers), doSet(t, servers)
	m := holders.NewMutex("insp:down", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	holders.Settle() // every node took the key
	servers[2].Kill()

	in, err := admin.Inspect(t.Context(), "insp:down")
	require.NoError(t, err, "two of three nodes answered")
	var nodeErr *mutex.NodeError
	require.ErrorAs(t, in.Nodes[2].Err, &nodeErr)
	assert.Equal(t, servers[2].Addr(), nodeErr.Node)
	ls := lockOf(t, in, "insp:down")
	assert.Equal(t, m.Value(), ls.Holder)
	require.ErrorAs(t, ls.Values[2].Err, &nodeErr)
	assert.NoError(t, in.Nodes[0].Err)

	servers[1].Kill()
	in, err = admin.Inspect(t.Context(), "insp:down")
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.ErrorAs(t, err, &nodeErr)
	require.NotNil(t, in, "the partial inspection comes with the error")
	assert.Equal(t, m.Value(), in.Locks[0].Values[0].Token, "what the node that answered holds")
	assert.Empty(t, in.Locks[0].Holder, "one node is no majority")

	in, err = admin.Inspect(t.Context(), "insp:unseen") // held or not, two nodes cannot tell
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.False(t, strings.HasPrefix(strings.SplitN(in.String(), "\n", 2)[1], "free"), "%s", in)
}

func TestInspectFindsPermitsAmongManyKeys(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := doSet(t, servers), doSet(t, servers)
	sem := holders.NewSemaphore("insp:many", 40, mutex.WithTTL(time.Minute))
	p, err := sem.AcquireContext(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.ReleaseContext(context.Background()) })
	// Keys that look like permits but are not: another name's, a permit's
	// queue, a number with more after it; and 5,000 unrelated keys, so the
	// search takes several steps.
	for _, s := range servers {
		s.Do(t, "SET", "insp:manyx:quorumlock:permit:1", "x")
		s.Do(t, "SET", "insp:many:quorumlock:permit:7x", "x")
		s.Do(t, "EVAL", "for i = 1, 5000 do redis.call('SET', 'filler:' .. i, 'x') end", 0)
	}
	in, err := admin.Inspect(t.Context(), "insp:many")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1, "%v", in)
	assert.Equal(t, "permit", in.Locks[0].Kind)
	assert.NotEmpty(t, in.Locks[0].Holder)
}

// countingHook counts the commands sent through a client.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

func TestInspectAndForceUnlockRefuseBadInput(t *testing.T) {
	servers := redistest.Start(t, 3)
	hook := &countingHook{}
	clients := redistest.Clients(t, servers)
	for _, c := range clients {
		c.AddHook(hook)
	}
	rs, err := redlock.New(clients, redlock.WithKeyPrefix("app:"))
	require.NoError(t, err)
	var nilSet *redlock.Redlock
	tests := []struct {
		name string
		rs   *redlock.Redlock
		ctx  context.Context
		lock string
		want string
	}{
		{"empty name", rs, t.Context(), "", "empty lock name"},
		{"fencing counter", rs, t.Context(), "quorumlock:fence", "reserved"},
		{"a lock's queue", rs, t.Context(), "orders:quorumlock:q", "reserved"},
		{"a permit", rs, t.Context(), "jobs:quorumlock:permit:0", "reserved"},
		{"too long", rs, t.Context(), strings.Repeat("x", mutex.MaxNameLen), "longer than"},
		{"nil context", rs, nil, "orders", "nil context"},
		{"nil set", nilSet, t.Context(), "orders", "nil *Redlock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := tt.rs.Inspect(tt.ctx, tt.lock)
			require.ErrorIs(t, err, mutex.ErrInvalid)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, in)
			ev, err := tt.rs.ForceUnlock(tt.ctx, tt.lock)
			require.ErrorIs(t, err, mutex.ErrInvalid)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, ev)
		})
	}
	assert.Zero(t, hook.n.Load(), "nothing was sent")
	if t.Failed() {
		return
	}
	_, err = rs.Inspect(t.Context(), "orders")
	require.NoError(t, err)
	assert.NotZero(t, hook.n.Load(), "the hook counts what Inspect sends")
}

// An ended ctx is reported as such, not as nodes unavailable: the nodes
// did not fail, the caller stopped waiting for them (and ForceUnlock
// removes nothing).
func TestInspectWithEndedContext(t *testing.T) {
	servers := redistest.Start(t, 3)
	admin := doSet(t, servers)
	m := admin.NewMutex("insp:ended", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	admin.Settle() // Lock returns at a majority: the last node's acquire may still be on its way
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	in, err := admin.Inspect(ctx, "insp:ended")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "healthy nodes")
	require.NotNil(t, in)
	for _, n := range in.Nodes {
		assert.True(t, errors.Is(n.Err, context.Canceled) || n.Err == nil, "%v", n.Err)
	}
	_, err = admin.ForceUnlock(ctx, "insp:ended")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "healthy nodes")
	for _, s := range servers {
		assert.Equal(t, int64(1), s.Do(t, "EXISTS", "insp:ended"), "removed although ForceUnlock failed")
	}
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A lock held on a majority, whose key two of five nodes lost and a third
// cannot be read: the two nodes that answered with the token and the one
// that failed could make a majority, so who holds it is unknown, not "held
// by no token" (which an operator would read as free, or stuck, and force).
func TestInspectWithAFailedNodeThatMayHoldTheMajority(t *testing.T) {
	servers := redistest.Start(t, 5)
	holders, admin := doSet(t, servers), doSet(t, servers)
	m := holders.NewMutex("insp:unknown", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	holders.Settle()
	servers[0].Do(t, "FLUSHALL")
	servers[1].Do(t, "FLUSHALL")
	servers[2].Kill()

	in, err := admin.Inspect(t.Context(), "insp:unknown")
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.ErrorContains(t, err, "who holds it is unknown")
	ls := lockOf(t, in, "insp:unknown")
	assert.Empty(t, ls.Holder)
	assert.Contains(t, in.String(), "holder unknown: "+m.Value()+" is on 2 nodes, and 1 failed")
	assert.NotContains(t, in.String(), "held by no token")

	servers[3].Do(t, "FLUSHALL") // now no token can have a majority: it is free
	in, err = admin.Inspect(t.Context(), "insp:unknown")
	require.NoError(t, err)
	assert.Contains(t, in.String(), "held by no token on a majority")
}
