package engine

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A fencing number's write-back queued on the client behind other commands
// is back-pressure: it waits while validity is left, its per-node timeout
// (400ms) counted from its departure, and the lock is obtained. Each node's
// link delays every round trip by 25ms. Its queue is filled with cheap script
// calls before the acquisition starts, and again the moment its acquire
// leaves for the node (behindAcquire), ahead of the write-back, which is
// queued only once the acquire's answers are back: the acquire waits behind
// some 10 round trips and the write-back behind some 40 (a second). Each
// call carries 100 arguments, so about 10 fill a round trip. The code that
// gave the write-back one per-node timeout from the moment it was queued
// failed it as ErrNodesUnavailable, every node "did not answer within the
// per-node timeout". The slow link keeps the round trips few: on a busy
// machine (CI), thousands of them behind a 100ms timeout had one take longer
// now and then, a true timeout.
func TestFenceWriteBackWaitsBehindTheClientsQueue(t *testing.T) {
	s := warmSet(t, 3, 400*time.Millisecond)
	nodes := s.Nodes
	l := NewContender(s, fastSpec("fence-queued"))
	keys, args := newKeyset("fence-flood", "fence-flood-counter"), make([]any, 100)
	for i := range args {
		args[i] = 1 // past the first two, unread
	}
	args[0] = "no-such-token"
	flood := func(n *node.Node, calls int) { // a token no key holds: each call reads one key and answers 0
		for range calls {
			n.Forget(node.FenceScript, keys.names, keys.args, args, nil)
		}
	}
	hooks := make([]*behindAcquire, len(nodes))
	for i, n := range nodes {
		hooks[i] = &behindAcquire{delay: 25 * time.Millisecond, name: "fence-queued", flood: func() { flood(n, 400) }}
		n.Client().(*redis.Client).AddHook(hook{hooks[i].process})
		flood(n, 100) // ahead of the acquire
	}
	done := make(chan error, 1)
	go func() { done <- l.Acquire(t.Context(), 1, nil) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the acquisition did not end")
	}
	require.NoError(t, err)
	assert.Positive(t, l.Current().Fence())
	for i, h := range hooks {
		assert.True(t, h.flooded.Load(), "node %d: nothing was queued behind the acquire", i)
	}
	s.Settle()
}

// behindAcquire delays every reply by delay (a slow link) and, the first
// time a command naming the lock name leaves, calls flood before that
// command's answer is read.
type behindAcquire struct {
	delay   time.Duration
	name    string
	flood   func()
	flooded atomic.Bool
}

func (h *behindAcquire) process(next func() error, cmds []redis.Cmder) error {
	if names(cmds, h.name) && h.flooded.CompareAndSwap(false, true) {
		h.flood()
	}
	err := next()
	time.Sleep(h.delay)
	return err
}

// hook is a go-redis hook that runs every command, alone or in a pipeline,
// through process, which calls next to send it.
type hook struct {
	process func(next func() error, cmds []redis.Cmder) error
}

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(func() error { return next(ctx, cmd) }, []redis.Cmder{cmd})
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.process(func() error { return next(ctx, cmds) }, cmds)
	}
}

// names reports whether a command of cmds names name.
func names(cmds []redis.Cmder, name string) bool {
	for _, c := range cmds {
		if strings.Contains(c.String(), name) {
			return true
		}
	}
	return false
}

// warmSet is realSet with a per-node timeout, and every script a fenced
// lock sends loaded on every node, so each call is one round trip.
func warmSet(t *testing.T, n int, timeout time.Duration) *Set {
	t.Helper()
	s := realSet(t, n)
	s.NodeTimeout = timeout
	warm := NewContender(s, fastSpec("warm"))
	require.NoError(t, warm.Acquire(t.Context(), 1, nil))
	require.NoError(t, warm.Release(t.Context(), warm.Current()))
	return s
}

// fastSpec is a fenced lock's spec with a long TTL and short retries.
func fastSpec(name string) Spec {
	return Spec{Name: name, TTL: 20 * time.Second, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, Fencing: true}
}

// realSet returns a set over n redis-servers the test starts, closed at its
// end, with the engine's errors as plain values.
func realSet(t *testing.T, n int) *Set {
	t.Helper()
	redistest.Require(t)
	servers := redistest.Start(t, n)
	nodes := make([]*node.Node, n)
	for i, c := range redistest.Clients(t, servers) {
		nodes[i] = node.New(c, servers[i].Addr(), clock.Real())
	}
	e := errors.New
	s := &Set{Nodes: nodes, Clock: clock.Real(), DriftFactor: 0.01, Errors: Errors{
		NotObtained: e("not obtained"), NodesUnavailable: e("unavailable"), NotHeld: e("not held"), Lost: e("lost"),
		NodeTimeout: e("timeout"), Quarantined: e("quarantined"), Closed: e("closed"),
		Node: func(_ string, err error) error { return err },
	}}
	t.Cleanup(s.Close)
	return s
}
