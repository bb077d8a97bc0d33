package mutex_test

import (
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestElectionReadsDoNotWaitForAPausedNode: with one node of five paused
// and a per-node timeout of 5s, Leader answers, and Observe delivers a
// Proclaim, well within it: a majority's answers decide.
func TestElectionReadsDoNotWaitForAPausedNode(t *testing.T) {
	servers := redistest.Start(t, 5)
	set := func() *redlock.Redlock {
		return newSet(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(5*time.Second))
	}
	cand, watcher := set().NewElection("reads"), set().NewElection("reads")
	require.NoError(t, cand.Campaign(t.Context(), "a"))
	obs := watcher.Observe(t.Context())
	require.Equal(t, "a", (<-obs).Value)

	servers[4].Pause()
	t.Cleanup(servers[4].Resume)
	for range 3 {
		within(t, 2*time.Second, func() {
			l, err := watcher.Leader(t.Context())
			require.NoError(t, err)
			assert.Equal(t, "a", l.Value)
		})
	}
	require.NoError(t, cand.Proclaim(t.Context(), "b"))
	within(t, 2*time.Second, func() {
		for l := range obs {
			if l.Value == "b" {
				return
			}
		}
	})
	require.NoError(t, cand.Resign(t.Context()))
	within(t, 2*time.Second, func() {
		_, err := watcher.Leader(t.Context())
		require.ErrorIs(t, err, mutex.ErrNoLeader)
	})
}

// TestLeaderSkipsStalledNodes: with a majority paused, once a Leader call
// has waited the per-node timeout (1s) for them, later calls do not queue
// behind it: they fail at once, each paused node reported timed out.
func TestLeaderSkipsStalledNodes(t *testing.T) {
	servers := redistest.Start(t, 5)
	e := newSet(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(time.Second)).NewElection("stalled")
	for _, s := range servers[:3] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	check := func() {
		_, err := e.Leader(t.Context())
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		requireNodeTimeouts(t, err, 3)
	}
	check()
	// Calls 2 and 3: without skipping, each waits the timeout again.
	within(t, 1500*time.Millisecond, func() { check(); check() })
}

// TestObserveClosesAtClose: the node set's Close closes an Observe channel
// at once, not at the observer's next poll (which a fake clock, never
// advanced, holds off for good).
func TestObserveClosesAtClose(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs := newSet(t, redistest.Clients(t, servers), redlock.WithNodeTimeout(time.Second),
		redlock.WithClock(clock.NewFake(time.Now())), redlock.WithoutNotifications())
	obs := rs.NewElection("closing").Observe(t.Context())
	require.Equal(t, mutex.Leader{}, <-obs)
	require.NoError(t, rs.Close())
	closed := make(chan struct{})
	go func() {
		for range obs {
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		require.FailNow(t, "Observe's channel still open 2s after Close")
	}
}

// requireNodeTimeouts checks that err carries n node failures, each a
// *NodeError matching ErrNodeTimeout.
func requireNodeTimeouts(t *testing.T, err error, n int) {
	t.Helper()
	var merr *multierror.Error
	require.ErrorAs(t, err, &merr)
	require.Len(t, merr.Errors, n)
	for _, e := range merr.Errors {
		var ne *mutex.NodeError
		require.ErrorAs(t, e, &ne)
		assert.ErrorIs(t, ne, mutex.ErrNodeTimeout, "%v", ne)
	}
}

// TestLeaderMidCampaignIsVacant: a Campaign's token on every node, its
// record still at proclamation 0 (won, not yet shown), reads as nobody
// leading, as design.md says; it read as ErrNodesUnavailable, a node
// failure, with every node healthy.
func TestLeaderMidCampaignIsVacant(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs := newSet(t, redistest.Clients(t, servers))
	for _, s := range servers {
		s.Do(t, "SET", "won", "tok", "PX", 10000)
		s.Do(t, "SET", "won:quorumlock:md", "tok\n0 0 a", "PX", 10000)
	}
	_, err := rs.NewElection("won").Leader(t.Context())
	require.ErrorIs(t, err, mutex.ErrNoLeader)
	require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
	// Shown on one node: the token is on a majority, and its latest
	// proclamation is reported, whichever nodes answer first.
	servers[2].Do(t, "SET", "won:quorumlock:md", "tok\n7 1 a", "PX", 10000)
	for range 5 {
		l, err := rs.NewElection("won").Leader(t.Context())
		require.NoError(t, err)
		assert.Equal(t, mutex.Leader{Value: "a", FencingToken: 7}, l)
	}
}
