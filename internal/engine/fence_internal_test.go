package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A fencing number's write-back queued on the client behind other commands
// is back-pressure: it waits while validity is left, its per-node timeout
// (100ms) counted from its departure, and the lock is obtained. Each node's
// queue is filled, from one goroutine, with cheap script calls answered in
// short round trips, before and while the acquisition runs, so its acquire
// and then its write-back wait behind them. The code that gave the write-back one
// per-node timeout from the moment it was queued failed it as
// ErrNodesUnavailable, every node "did not answer within the per-node
// timeout".
func TestFenceWriteBackWaitsBehindTheClientsQueue(t *testing.T) {
	s := realSet(t, 3)
	s.NodeTimeout = 100 * time.Millisecond
	nodes := s.Nodes
	spec := func(name string) Spec {
		return Spec{Name: name, TTL: 20 * time.Second, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, Fencing: true}
	}
	warm := NewContender(s, spec("fence-warm")) // the scripts loaded on every node
	require.NoError(t, warm.Acquire(t.Context(), 1, nil))
	require.NoError(t, warm.Release(t.Context(), warm.Current()))

	l := NewContender(s, spec("fence-queued"))
	keys, args := newKeyset("fence-flood", "fence-flood-counter"), []any{"no-such-token", 1}
	flood := func(calls int) { // a token no key holds: each call reads one key and answers 0
		for range calls {
			for _, n := range nodes {
				n.Forget(node.FenceScript, keys.names, keys.args, args, nil)
			}
		}
	}
	flood(5_000) // ahead of the acquire
	done := make(chan error, 1)
	go func() { done <- l.Acquire(t.Context(), 1, nil) }()
	flood(25_000) // behind it, ahead of its write-back
	var err error
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the acquisition did not end")
	}
	require.NoError(t, err)
	assert.Positive(t, l.Current().Fence())
	s.Settle()
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
