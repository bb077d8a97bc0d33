package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A killed node's refusals are node errors with its address, also when the
// lock is obtained without it (the error then carries none); with a
// majority down, the outcome is unavailable and names the failed nodes.
func TestObserverSeesNodeErrors(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, rec := observedSet(t, servers)
	servers[2].Kill()
	m := rs.NewMutex("node-errors")
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
	failed := rec.await(t, "NodeError", 2, nil) // the acquire's and the release's
	for _, f := range failed {
		assert.Equal(t, servers[2].Addr(), f.failure.Node)
		assert.Equal(t, "connection", f.failure.Type, "%v", f.failure.Err)
		assert.Error(t, f.failure.Err)
	}
	assert.Empty(t, rec.of("Done")[0].result.FailedNodes, "obtained: the error carries no node")

	servers[1].Kill()
	rec.reset()
	err := m.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	d := rec.await(t, "Done", 1, nil)[0]
	assert.Equal(t, redlock.OutcomeUnavailable, d.result.Outcome)
	assert.ElementsMatch(t, []string{servers[1].Addr(), servers[2].Addr()}, d.result.FailedNodes)
	assert.Same(t, err, d.result.Err)
}

// A node that answers later than the per-node timeout: the lock is decided
// without it, and its late answer is a node error of type timeout. The
// set's clock is a fake one, moved an hour on while the node is paused.
func TestObserverSeesLateAnswers(t *testing.T) {
	servers := redistest.Start(t, 3)
	fake := clock.NewFake(time.Now())
	rs, rec := observedSet(t, servers, redlock.WithClock(longTimersOnFake{fake}), redlock.WithNodeTimeout(100*time.Millisecond))
	servers[0].Pause()
	m := rs.NewMutex("late")
	require.NoError(t, m.LockContext(t.Context()), "nodes 1 and 2 are a majority")
	fake.Advance(time.Hour)
	servers[0].Resume()
	f := rec.await(t, "NodeError", 1, nil)[0]
	assert.Equal(t, servers[0].Addr(), f.failure.Node)
	assert.Equal(t, "timeout", f.failure.Type, "%v", f.failure.Err)
	assert.ErrorIs(t, f.failure.Err, mutex.ErrNodeTimeout)
	require.NoError(t, m.UnlockContext(t.Context()))
}

// lostSet is a set whose long timers (the renewals of a 1h lease) run on a
// fake clock, with a recorder.
func lostSet(t *testing.T, servers []*redistest.Server) (*redlock.Redlock, *recorder, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Now())
	rs, rec := observedSet(t, servers, redlock.WithClock(longTimersOnFake{fake}))
	return rs, rec, fake
}

// Each way a lease ends unasked is a LeaseLost with its cause: the token
// gone (not_held), renewals without a majority (unavailable), the validity
// run out unrenewed (expired), Close (closed).
func TestObserverSeesLeasesLost(t *testing.T) {
	const ttl = time.Hour
	lost := func(t *testing.T, rec *recorder, cause redlock.LossCause) redlock.LeaseLoss {
		t.Helper()
		l := rec.await(t, "LeaseLost", 1, nil)[0].loss
		assert.Equal(t, cause, l.Cause, "%v", l.Err)
		assert.Equal(t, "mutex", l.Primitive)
		assert.ErrorIs(t, l.Err, mutex.ErrLost)
		return l
	}
	t.Run("not_held", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		rs, rec, fake := lostSet(t, servers)
		m := rs.NewMutex("lost", mutex.WithTTL(ttl), mutex.WithAutoExtend())
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, fake.BlockUntil(t.Context(), 1), "the renewal is scheduled")
		for _, s := range servers {
			s.Do(t, "DEL", "lost")
		}
		fake.Advance(ttl / 3)
		l := lost(t, rec, redlock.LossNotHeld)
		assert.Equal(t, "lost", l.Name)
		assert.ErrorIs(t, l.Err, mutex.ErrNotHeld)
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
		d := rec.of("Done")
		assert.Equal(t, redlock.OutcomeNotHeld, d[len(d)-1].result.Outcome)
		rel := rec.await(t, "Released", 1, nil)[0].release
		assert.Equal(t, ttl/3, rel.Held, "the unlock ended the acquisition")
		assert.Greater(t, rel.ValidityLeft, ttl/2, "as the holder last knew it")
	})
	t.Run("unavailable", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		rs, rec, fake := lostSet(t, servers)
		m := rs.NewMutex("lost", mutex.WithTTL(ttl), mutex.WithAutoExtend())
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, fake.BlockUntil(t.Context(), 1))
		servers[0].Kill()
		servers[1].Kill()
		fake.Advance(ttl / 3) // the renewal reaches no majority
		rec.await(t, "NodeError", 2, nil)
		fake.Advance(ttl) // and the validity ends
		lost(t, rec, redlock.LossUnavailable)
	})
	t.Run("expired", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		rs, rec, fake := lostSet(t, servers)
		m := rs.NewMutex("lost", mutex.WithTTL(ttl))
		require.NoError(t, m.LockContext(t.Context()))
		lostCh := m.Lost() // watched, not renewed
		require.NoError(t, fake.BlockUntil(t.Context(), 1))
		fake.Advance(ttl)
		<-lostCh
		lost(t, rec, redlock.LossExpired)
		require.NoError(t, m.UnlockContext(t.Context()), "the keys, under a real 1h TTL, are still there")
	})
	// The holder released (too few nodes confirmed), then the acquisition
	// it kept for a retry ran out: no lease was lost while anyone worked,
	// and an alert on LeaseLost would be a false one (review 29).
	t.Run("released", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		rs, rec, fake := lostSet(t, servers)
		m := rs.NewMutex("lost", mutex.WithTTL(ttl))
		require.NoError(t, m.LockContext(t.Context()))
		servers[0].Kill()
		servers[1].Kill()
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNodesUnavailable)
		lostCh := m.Lost()
		require.NoError(t, fake.BlockUntil(t.Context(), 1), "the loss deadline is scheduled")
		fake.Advance(ttl)
		<-lostCh // the observer is told before Lost closes
		assert.Empty(t, rec.of("LeaseLost"))
	})
	t.Run("closed", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		rs, rec := observedSet(t, servers)
		require.NoError(t, rs.NewMutex("lost").LockContext(t.Context()))
		require.NoError(t, rs.Close())
		lost(t, rec, redlock.LossClosed)
		assert.Empty(t, rec.of("Released"), "Close is no unlock: its release is reported as the loss alone")
	})
}

// The restart quarantine: young nodes enter it at first contact and leave
// it when it ends; a node restarted later enters it again; Close counts as
// leaving.
func TestObserverSeesTheQuarantine(t *testing.T) {
	servers := redistest.Start(t, 3)
	fake := clock.NewFake(time.Now())
	rs, rec := observedSet(t, servers, redlock.WithClock(longTimersOnFake{fake}), redlock.WithRestartQuarantine(time.Hour))
	m := rs.NewMutex("quarantine")
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrQuarantined)
	entered := rec.await(t, "QuarantineEnter", 3, nil)
	var nodes []string
	for _, e := range entered {
		nodes = append(nodes, e.node)
		assert.WithinDuration(t, fake.Now().Add(time.Hour), e.until, time.Minute)
	}
	assert.ElementsMatch(t, rs.Nodes(), nodes)
	assert.Empty(t, rec.of("NodeError"), "a quarantined node is not a failing one")

	fake.Advance(time.Hour)
	assert.Len(t, rec.await(t, "QuarantineLeave", 3, nil), 3)
	require.NoError(t, m.TryLockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))

	servers[1].RestartEmpty()
	_ = m.TryLockContext(t.Context()) // obtained or not, the restart is seen
	back := rec.await(t, "QuarantineEnter", 4, nil)[3]
	assert.Equal(t, servers[1].Addr(), back.node)
	require.NoError(t, rs.Close())
	left := rec.await(t, "QuarantineLeave", 4, nil)[3]
	assert.Equal(t, servers[1].Addr(), left.node)
}

// A Semaphore's calls are reported as its own, not as those of the permits
// it tries: one Start and Done per call, its attempts over all the permits,
// one wait however many permit queues it joins.
func TestObserverSeesSemaphoreCalls(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, rec := observedSet(t, servers)
	sem := rs.NewSemaphore("pool", 2)
	var permits []*mutex.Permit
	for range 2 {
		p, err := sem.TryAcquireContext(t.Context())
		require.NoError(t, err)
		permits = append(permits, p)
	}
	_, err := sem.TryAcquireContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	done := rec.of("Done")
	require.Len(t, done, 3)
	assert.Equal(t, redlock.Call{Op: redlock.OpTryLock, Primitive: "semaphore", Name: "pool"}, done[2].call)
	assert.Equal(t, redlock.OutcomeBusy, done[2].result.Outcome)
	assert.Equal(t, 2, done[2].result.Attempts, "one try per permit")

	got := make(chan *mutex.Permit, 1)
	go func() {
		p, err := sem.AcquireContext(t.Context())
		assert.NoError(t, err)
		got <- p
	}()
	started := rec.await(t, "WaitStart", 1, nil)[0]
	assert.Equal(t, redlock.Call{Op: redlock.OpLock, Primitive: "semaphore", Name: "pool"}, started.call)
	require.NoError(t, permits[0].ReleaseContext(t.Context()))
	p := <-got
	require.NotNil(t, p)
	require.NoError(t, p.ReleaseContext(t.Context()))
	require.NoError(t, permits[1].ReleaseContext(t.Context()))

	assert.Len(t, rec.of("WaitStart"), 1, "one wait for the whole call")
	assert.Len(t, rec.of("WaitStop"), 1)
	assert.Len(t, rec.of("Released"), 3)
	for _, d := range rec.of("Done") {
		assert.Equal(t, "semaphore", d.call.Primitive)
		assert.Equal(t, "pool", d.call.Name)
	}
	assert.Len(t, rec.of("Start"), 7, "3 TryAcquire, 1 Acquire, 3 Release")
}

// An Observer with no field set, or none at all, changes nothing.
func TestObserverFieldsAreOptional(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, o := range []*redlock.Observer{nil, {}} {
		rs := doSet(t, servers, redlock.WithObserver(o))
		m := rs.NewMutex("optional")
		require.NoError(t, m.LockContext(context.Background()))
		require.NoError(t, m.UnlockContext(context.Background()))
		require.NoError(t, rs.Close())
	}
}
