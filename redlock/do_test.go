package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The tests of Do run against three real redis-server processes.

// doWait bounds every wait of these tests for something the code under test
// signals.
const doWait = 10 * time.Second

// doSet returns a node set over new clients of servers, as a separate service
// would have. Its per-node timeout is a generous second, so a loaded machine
// does not turn a slow answer into a failure the test did not ask for.
func doSet(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	rs, err := redlock.New(redistest.Clients(t, servers),
		append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	return rs
}

// requireFree fails the test unless another client can take name at once
// (and then releases it): Do left the lock free.
func requireFree(t *testing.T, rs *redlock.Redlock, name string) {
	t.Helper()
	m := rs.NewMutex(name)
	require.NoError(t, m.TryLockContext(t.Context()), "the lock on %q is still held", name)
	require.NoError(t, m.UnlockContext(t.Context()))
}

func TestDoRunsFnWhileHoldingTheLock(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, other := doSet(t, servers), doSet(t, servers)
	baseline := goleak.IgnoreCurrent()

	calls := 0
	var fnCtx context.Context
	err := rs.Do(t.Context(), "do:held", func(ctx context.Context) error {
		calls++
		fnCtx = ctx
		require.NoError(t, ctx.Err(), "fn's ctx is live while the lock is held")
		// A majority holds the key; the third may still be on its way, as
		// Lock returns once a majority granted it.
		holding := 0
		for _, s := range servers {
			if s.Do(t, "GET", "do:held") != nil {
				holding++
			}
		}
		assert.GreaterOrEqual(t, holding, 2, "a majority holds the lock key while fn runs")
		err := other.NewMutex("do:held").TryLockContext(ctx)
		require.ErrorIs(t, err, mutex.ErrNotObtained, "another client cannot take the lock while fn runs")
		assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "refused as held by an owner, not for want of nodes: %v", err)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
	require.Error(t, fnCtx.Err(), "fn's ctx ends when Do returns")
	assert.NotErrorIs(t, context.Cause(fnCtx), mutex.ErrLost, "a normal end is not a loss")
	goleak.VerifyNone(t, baseline) // no watcher or renewal goroutine outlives Do
	requireFree(t, other, "do:held")
}

func TestDoReturnsFnsErrorAndReleases(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, other := doSet(t, servers), doSet(t, servers)
	errJob := errors.New("job failed")

	err := rs.Do(t.Context(), "do:fails", func(context.Context) error {
		return fmt.Errorf("step 2: %w", errJob)
	})
	require.ErrorIs(t, err, errJob)
	assert.NotErrorIs(t, err, mutex.ErrLost)
	assert.NotErrorIs(t, err, mutex.ErrNotHeld)
	assert.NotErrorIs(t, err, mutex.ErrNotObtained)
	requireFree(t, other, "do:fails")
}

func TestDoDoesNotRunFnWithoutTheLock(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, other := doSet(t, servers), doSet(t, servers)
	holder := other.NewMutex("do:taken")
	require.NoError(t, holder.LockContext(t.Context()))

	// A bounded ctx, so that a Do that ignored WithTries(1) would fail the
	// test below (deadline, duration) instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), doWait)
	defer cancel()
	called := false
	start := time.Now()
	err := rs.Do(ctx, "do:taken", func(context.Context) error {
		called = true
		return nil
	}, mutex.WithTries(1))
	took := time.Since(start)
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "refused because another owner holds it: %v", err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "one try, not retries until ctx ended")
	assert.Less(t, took, doWait/2, "one try returns at once")
	assert.False(t, called, "fn ran without the lock")

	require.NoError(t, holder.ExtendContext(t.Context()), "the holder's lock is intact")
	require.NoError(t, holder.UnlockContext(t.Context()))
}

// longTimersOnFake reads the time of a fake clock and runs long timers (10s
// and more: the lease's renewals under a 1h TTL) on it, while short ones (the
// per-node deadlines) keep running on real time. So the test decides when a
// renewal happens, and every network round keeps its real deadline.
type longTimersOnFake struct{ *clock.Fake }

func (c longTimersOnFake) NewTimer(d time.Duration) clock.Timer {
	if d < 10*time.Second {
		return clock.Real().NewTimer(d)
	}
	return c.Fake.NewTimer(d)
}

// loseDuringDo runs Do under a 1h TTL and, while fn runs, deletes the lock
// key from every node (as if it had expired, or another owner's had taken
// its place) and lets the next renewal run. fn waits for its ctx to end and
// returns ret(context.Cause(ctx)). loseDuringDo returns that cause and Do's
// error, and checks that no goroutine of Do outlived it.
func loseDuringDo(t *testing.T, ret func(cause error) error) (cause, err error) {
	t.Helper()
	const ttl = time.Hour // a renewal every 20 fake minutes
	servers := redistest.Start(t, 3)
	fake := clock.NewFake(time.Now())
	rs := doSet(t, servers, redlock.WithClock(longTimersOnFake{fake}))
	baseline := goleak.IgnoreCurrent()

	started := make(chan struct{})
	giveUp := make(chan struct{}) // closed if fn's ctx is never cancelled
	done := make(chan error, 1)
	go func() {
		done <- rs.Do(t.Context(), "do:lost", func(ctx context.Context) error {
			close(started)
			select {
			case <-ctx.Done():
			case <-giveUp:
				return errors.New("fn's ctx was never cancelled")
			}
			cause = context.Cause(ctx) // read by the test after done
			return ret(cause)
		}, mutex.WithTTL(ttl))
	}()
	returned := false
	defer func() { // a failing test still waits for Do
		if !returned {
			close(giveUp)
			<-done
		}
	}()

	wait, cancel := context.WithTimeout(t.Context(), doWait)
	defer cancel()
	select {
	case <-started:
	case err := <-done:
		returned = true
		t.Fatalf("Do returned before fn ran: %v", err)
	case <-wait.Done():
		t.Fatal("fn never started")
	}
	require.NoError(t, fake.BlockUntil(wait, 1), "the renewal never got scheduled")
	deleted := int64(0)
	for _, s := range servers {
		deleted += s.Do(t, "DEL", "do:lost").(int64)
	}
	// Do returned from the lock at the majority; a straggler may land later,
	// which leaves the token on a minority: still a loss.
	require.GreaterOrEqual(t, deleted, int64(2), "a majority held the lock")
	fake.Advance(ttl / 3) // the renewal runs and finds the token gone

	select {
	case err = <-done:
		returned = true
	case <-wait.Done():
		t.Fatal("fn's ctx was not cancelled after the renewal found the lock gone")
	}
	goleak.VerifyNone(t, baseline) // the watcher and Do's own goroutine are gone
	return cause, err
}

// The next renewal finds the token gone: fn's ctx is cancelled with the loss
// as cause, and Do's error carries the loss.
func TestDoCancelsFnWhenTheLockIsLost(t *testing.T) {
	cause, err := loseDuringDo(t, func(cause error) error { return cause })
	require.ErrorIs(t, cause, mutex.ErrLost, "fn's ctx is cancelled with the loss as cause")
	require.ErrorIs(t, cause, mutex.ErrNotHeld)
	require.ErrorIs(t, err, mutex.ErrLost)
	require.ErrorIs(t, err, mutex.ErrNotHeld)
	assert.NotContains(t, err.Error(), "unlock", "the ErrNotHeld of Do's own release is the same loss, not reported again")
}

// Do reports a loss once, whether fn returns an error of its own or the
// cause of its ctx, as work that stops on ctx.Done() naturally does.
func TestDoReportsTheLossOnce(t *testing.T) {
	errStopped := errors.New("stopped early")
	t.Run("fn returns its own error", func(t *testing.T) {
		cause, err := loseDuringDo(t, func(error) error { return errStopped })
		require.ErrorIs(t, err, errStopped)
		require.ErrorIs(t, err, mutex.ErrLost, "Do adds the loss fn did not report")
		assert.Equal(t, 1, strings.Count(err.Error(), cause.Error()), "Do returned:\n%v", err)
	})
	t.Run("fn returns context.Cause", func(t *testing.T) {
		cause, err := loseDuringDo(t, func(cause error) error { return cause })
		require.ErrorIs(t, err, mutex.ErrLost)
		assert.Equal(t, 1, strings.Count(err.Error(), cause.Error()),
			"the loss is reported once; Do returned:\n%v", err)
	})
}

func TestDoReleasesTheLockWhenFnPanics(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, other := doSet(t, servers), doSet(t, servers)

	var recovered any
	returned := false
	func() {
		defer func() { recovered = recover() }()
		_ = rs.Do(t.Context(), "do:panics", func(context.Context) error { panic("boom") })
		returned = true
	}()
	assert.False(t, returned, "Do returned instead of panicking")
	assert.Equal(t, "boom", recovered, "Do lets fn's panic through")
	requireFree(t, other, "do:panics")
}
