package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	s := newSet(servers, clients, clock.NewFake(time.Now())) // stands still: every pass is within the time bound
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

// newSet returns a set over servers' clients, on c, as package redlock makes one.
func newSet(servers []*redistest.Server, clients []redis.UniversalClient, c clock.Clock) *Set {
	nodes := make([]*node.Node, len(clients))
	for i, cl := range clients {
		nodes[i] = node.New(cl, servers[i].Addr(), c)
	}
	e := errors.New
	return &Set{Nodes: nodes, Clock: c, DriftFactor: 0.01, Notify: true, Handoff: true, Errors: Errors{
		NotObtained: e("not obtained"), NodesUnavailable: e("unavailable"), NotHeld: e("not held"),
		Lost: e("lost"), NodeTimeout: e("timeout"),
		Quarantined: e("quarantined"), Closed: e("closed"),
		Node: func(addr string, err error) error { return err },
	}}
}

// A suspect node's Yes does not win an extension ("Renewals put lost keys
// back"), nor does it end the wait for the others: with 2 of 5 nodes
// suspect and 1 of the other 3 paused, ExtendContext fails
// NodesUnavailable once the paused one times out, Until unchanged; with it
// back, it succeeds on the 3 trusted answers. Review 25: the 4 Yes decided the round
// while only 2 counted, and Extend failed "its time ran out" with no
// sentinel, though every node had extended.
func TestAnExtensionWaitsForTrustedAnswers(t *testing.T) {
	redistest.Require(t)
	servers := redistest.Start(t, 5)
	s := newSet(servers, redistest.Clients(t, servers), clock.Real())
	s.NodeTimeout = 100 * time.Millisecond
	defer s.Close()
	l := NewContender(s, Spec{Name: "suspects", TTL: time.Minute, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond})
	require.NoError(t, l.Acquire(t.Context(), 1, nil))
	s.Settle() // every node has the token
	h := l.Current()
	l.mu.Lock()
	h.holders, h.suspect = 1<<5-1, 1<<3|1<<4 // as a pass gives them while the giver's renewal is in flight
	l.mu.Unlock()
	until := h.Until()

	servers[0].Pause()
	err := l.Extend(t.Context(), h)
	servers[0].Resume()
	require.ErrorIs(t, err, s.Errors.NodesUnavailable, "2 trusted Yes, 1 failed")
	assert.Equal(t, until, h.Until())
	s.Settle() // the resumed node answered: it is no longer stalled

	require.NoError(t, l.Extend(t.Context(), h))
	assert.True(t, h.Until().After(until))
	require.NoError(t, l.Release(t.Context(), h))
}
