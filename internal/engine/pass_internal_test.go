package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A call whose lock was passed to it, but which ended before it woke (its
// ctx, Close, its last try), passes the lock on to the next waiter, with
// the next fencing number, or, with nobody left, releases it on every node:
// nothing stays held. The interleaving is forced: the heirs are registered
// as Acquire registers them, and leave as its return does.
func TestAPassToACallThatEndedGoesOnOrIsReleased(t *testing.T) {
	redistest.Require(t)
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	fake := clock.NewFake(time.Now()) // stands still: every pass is within the time bound
	nodes := make([]*node.Node, len(clients))
	for i, c := range clients {
		nodes[i] = node.New(c, servers[i].Addr(), fake)
	}
	e := errors.New
	s := &Set{Nodes: nodes, Clock: fake, DriftFactor: 0.01, Notify: true, Handoff: true, Errors: Errors{
		NotObtained: e("not obtained"), NodesUnavailable: e("unavailable"), NotHeld: e("not held"),
		Lost: e("lost"), NodeTimeout: e("timeout"),
		Quarantined: e("quarantined"), Closed: e("closed"),
		Node: func(addr string, err error) error { return err },
	}}
	defer s.Close()
	spec := Spec{Name: "vanish", TTL: 10 * time.Second, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, Fencing: true}
	giver, gone, next := NewContender(s, spec), NewContender(s, spec), NewContender(s, spec)
	require.NoError(t, giver.Acquire(t.Context(), 1, nil))
	first := giver.Current()

	ctx, cancel := context.WithCancel(t.Context())
	heirGone := s.cohort.join(gone, place{}, 1, ctx.Done())
	heirNext := s.cohort.join(next, place{}, 2, t.Context().Done())
	require.NoError(t, giver.Release(t.Context(), first))
	cancel() // the call ends before it wakes: it leaves, finding the pass
	passed := s.cohort.leave(heirGone)
	require.NotNil(t, passed, "the oldest heir was passed the lock")
	gone.abandon(passed)

	var onward *Hold
	select {
	case onward = <-heirNext.got:
	default:
		t.Fatal("the lock was not passed on to the next heir")
	}
	assert.Equal(t, first.Token(), onward.Token())
	assert.Equal(t, first.Fence()+2, onward.Fence(), "each holder of the chain has its own number")
	assert.Nil(t, s.cohort.leave(heirNext))
	// The last one is gone too, with nobody after it: released on the nodes.
	next.abandon(onward)
	s.Settle()
	for i, c := range clients {
		assert.Zero(t, c.Exists(t.Context(), "vanish").Val(), "node %d: the key was left behind", i)
	}
	select {
	case <-onward.Done():
	default:
		t.Fatal("the abandoned hold did not end")
	}
	s.close.mu.Lock()
	assert.Empty(t, s.close.holds, "Close would find a hold nobody has")
	s.close.mu.Unlock()
}
