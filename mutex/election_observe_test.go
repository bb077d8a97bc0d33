package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// observed is one delivery of Observe and when it came.
type observed struct {
	l  mutex.Leader
	at time.Time
}

// nextLeader returns the next delivery of ch, failing after 5s.
func nextLeader(t *testing.T, ch <-chan observed) observed {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Observe delivered nothing within 5s")
		return observed{}
	}
}

// TestElectionObserveDeliversEveryChange: an observer that never campaigns
// sees the vacancy, each new leader (the moment between two may be seen
// as a vacancy), a Proclaim and the vacancy after the
// last Resign, in order, each well within the poll (1s with the default
// TTL): the announcements on the key's channel wake it, not the poll.
func TestElectionObserveDeliversEveryChange(t *testing.T) {
	servers := redistest.Start(t, 3)
	ctx, cancel := context.WithCancel(t.Context())
	a, b := mdSet(t, servers).NewElection("obs"), mdSet(t, servers).NewElection("obs")
	raw := mdSet(t, servers).NewElection("obs").Observe(ctx)
	ch := make(chan observed, 16)
	go func() {
		for l := range raw {
			ch <- observed{l, time.Now()}
		}
		close(ch)
	}()

	assert.Equal(t, mutex.Leader{}, nextLeader(t, ch).l, "first the current state: nobody leads")
	var delays []time.Duration
	expect := func(after time.Time, want string) mutex.Leader {
		t.Helper()
		o := nextLeader(t, ch)
		if o.l == (mutex.Leader{}) && want != "" {
			o = nextLeader(t, ch) // the vacancy between two leaders, if seen
		}
		require.Equal(t, want, o.l.Value)
		delays = append(delays, max(o.at.Sub(after), 0))
		return o.l
	}

	time.Sleep(50 * time.Millisecond) // let the subscription settle, as a long-lived observer's has
	start := time.Now()
	require.NoError(t, a.Campaign(ctx, "a"))
	la := expect(start, "a")
	start = time.Now()
	require.NoError(t, a.Proclaim(ctx, "a2"))
	assert.Equal(t, la.FencingToken, expect(start, "a2").FencingToken)

	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx, "b") }()
	require.Eventually(t, func() bool { return servers[0].Do(t, "ZCARD", "obs:quorumlock:q").(int64) == 1 }, 5*time.Second, 5*time.Millisecond)
	start = time.Now()
	require.NoError(t, a.Resign(ctx))
	require.NoError(t, <-won)
	lb := expect(start, "b")
	assert.Greater(t, lb.FencingToken, la.FencingToken)
	start = time.Now()
	require.NoError(t, b.Resign(ctx))
	expect(start, "")

	for i, d := range delays {
		assert.Less(t, d, 300*time.Millisecond, "change %d seen after %v: not woken by its announcement", i, d)
	}
	t.Logf("observe delays: %v", delays)
	cancel()
	for range ch { // closed once ctx ended
	}
}

// TestElectionObserveEndsWithClose: Observe's channel closes when its node
// set is closed, not only when ctx ends.
func TestElectionObserveEndsWithClose(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs := mdSet(t, servers)
	ch := rs.NewElection("closing").Observe(t.Context())
	assert.Equal(t, mutex.Leader{}, <-ch)
	rs.Close()
	select {
	case _, open := <-ch:
		assert.False(t, open, "nothing more is delivered")
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Observe's channel still open 5s after Close")
	}
}

// TestElectionWatcherUnderRestartQuarantine: with the restart quarantine
// on, a watcher that never campaigns, left at the default TTL (8s, longer
// than the quarantine), reads and observes the leader: its TTL bounds only
// a leadership, which it never holds. A candidate's TTL is still checked.
func TestElectionWatcherUnderRestartQuarantine(t *testing.T) {
	servers := redistest.Start(t, 3)
	quarantined := func() *redlock.Redlock {
		rs, err := redlock.New(redistest.Clients(t, servers), redlock.WithRestartQuarantine(time.Second))
		require.NoError(t, err)
		return rs
	}
	watcher := quarantined().NewElection("watched")
	_, err := watcher.Leader(t.Context())
	require.ErrorIs(t, err, mutex.ErrNoLeader)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	seen := watcher.Observe(ctx)
	select {
	case l, ok := <-seen:
		require.True(t, ok, "Observe closed at once")
		assert.Equal(t, mutex.Leader{}, l, "nobody leads yet")
	case <-time.After(5 * time.Second):
		t.Fatal("Observe delivered nothing within 5s")
	}
	require.ErrorIs(t, watcher.Campaign(t.Context(), "w"), mutex.ErrInvalid, "a leadership's TTL must be within the quarantine")

	candidate := quarantined().NewElection("watched", mutex.WithTTL(500*time.Millisecond))
	require.NoError(t, candidate.Campaign(t.Context(), "c"))
	defer func() { _ = candidate.Resign(context.Background()) }()
	for {
		select {
		case l := <-seen:
			if l.Value == "c" {
				got, err := watcher.Leader(t.Context())
				require.NoError(t, err)
				assert.Equal(t, l, got)
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the watcher never saw the candidate lead")
		}
	}
}
