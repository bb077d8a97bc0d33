package redlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The tests of the Observer hooks run against three real redis-server
// processes, with an observer that records every report.

// report is one thing an Observer was told.
type report struct {
	hook    string // the Observer field that was called
	call    redlock.Call
	result  redlock.Result
	release redlock.Release
	loss    redlock.LeaseLoss
	failure redlock.NodeFailure
	node    string // QuarantineEnter, QuarantineLeave
	until   time.Time
	fromCtx any // the value of ctxMark in the ctx Done and Released got
}

type ctxKey struct{}

// recorder records the reports of an Observer; safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	reports []report
	changed chan struct{} // closed and replaced at every report
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) add(rep report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, rep)
	close(r.changed)
	r.changed = make(chan struct{})
}

// observer returns an Observer that records into r. Start marks the ctx it
// returns with the call's op, so that the tests can see that Done and
// Released get it.
func (r *recorder) observer() *redlock.Observer {
	return &redlock.Observer{
		Start: func(ctx context.Context, c redlock.Call) context.Context {
			r.add(report{hook: "Start", call: c})
			return context.WithValue(ctx, ctxKey{}, c.Op)
		},
		Done: func(ctx context.Context, c redlock.Call, res redlock.Result) {
			r.add(report{hook: "Done", call: c, result: res, fromCtx: ctx.Value(ctxKey{})})
		},
		Released: func(ctx context.Context, c redlock.Call, rel redlock.Release) {
			r.add(report{hook: "Released", call: c, release: rel, fromCtx: ctx.Value(ctxKey{})})
		},
		LeaseLost: func(l redlock.LeaseLoss) { r.add(report{hook: "LeaseLost", loss: l}) },
		NodeError: func(e redlock.NodeFailure) { r.add(report{hook: "NodeError", failure: e}) },
		QuarantineEnter: func(node string, until time.Time) {
			r.add(report{hook: "QuarantineEnter", node: node, until: until})
		},
		QuarantineLeave: func(node string) { r.add(report{hook: "QuarantineLeave", node: node}) },
		WaitStart:       func(c redlock.Call) { r.add(report{hook: "WaitStart", call: c}) },
		WaitStop:        func(c redlock.Call) { r.add(report{hook: "WaitStop", call: c}) },
	}
}

// of returns the reports of the given hook so far.
func (r *recorder) of(hook string) []report {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []report
	for _, rep := range r.reports {
		if rep.hook == hook {
			out = append(out, rep)
		}
	}
	return out
}

// hooks returns the hooks called so far, in order, leaving out those given.
func (r *recorder) hooks(except ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rep := range r.reports {
		if !slices.Contains(except, rep.hook) {
			out = append(out, rep.hook)
		}
	}
	return out
}

// await waits, at most doWait, until n reports of hook that match (nil: all)
// have been made, and returns them.
func (r *recorder) await(t *testing.T, hook string, n int, match func(report) bool) []report {
	t.Helper()
	timeout := time.After(doWait)
	for {
		r.mu.Lock()
		var got []report
		for _, rep := range r.reports {
			if rep.hook == hook && (match == nil || match(rep)) {
				got = append(got, rep)
			}
		}
		changed := r.changed
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%d %s reports after %v, want %d: %v", len(got), hook, doWait, n, r.hooks())
		}
	}
}

// reset forgets the reports so far.
func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = nil
}

// observedSet returns a set over servers that reports to a new recorder.
// Its clients use the settings we recommend for lock clients (a stopped
// node fails at once, not after go-redis's retries), and its per-node
// timeout is a generous second unless opts say otherwise.
func observedSet(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) (*redlock.Redlock, *recorder) {
	t.Helper()
	rec := newRecorder()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	}
	opts = append([]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithObserver(rec.observer())}, opts...)
	rs, err := redlock.New(clients, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	return rs, rec
}

// Each call is reported once, Start then Done (Released before Done for an
// unlock), with the ctx Start returned, the call's outcome, attempts, how
// long the lock was held and what was left of its validity.
func TestObserverSeesEachCall(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, rec := observedSet(t, servers)
	m := rs.NewMutex("observed", mutex.WithTTL(10*time.Second))
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.ExtendContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
	assert.Equal(t, []string{"Start", "Done", "Start", "Done", "Start", "Released", "Done"}, rec.hooks())

	done := rec.of("Done")
	for i, want := range []struct {
		op      redlock.Op
		outcome redlock.Outcome
	}{{redlock.OpLock, redlock.OutcomeObtained}, {redlock.OpExtend, redlock.OutcomeExtended}, {redlock.OpUnlock, redlock.OutcomeReleased}} {
		d := done[i]
		assert.Equal(t, redlock.Call{Op: want.op, Primitive: "mutex", Name: "observed"}, d.call)
		assert.Equal(t, want.outcome, d.result.Outcome)
		assert.Equal(t, 1, d.result.Attempts, "%s", want.op)
		assert.NoError(t, d.result.Err)
		assert.Empty(t, d.result.FailedNodes)
		assert.Positive(t, d.result.Duration)
		assert.Equal(t, want.op, d.fromCtx, "Done gets the ctx Start returned")
	}
	rel := rec.of("Released")[0]
	assert.Equal(t, redlock.OpUnlock, rel.fromCtx)
	assert.Positive(t, rel.release.Held)
	assert.Greater(t, rel.release.ValidityLeft, 9*time.Second, "just extended to a 10s TTL")
	assert.LessOrEqual(t, rel.release.ValidityLeft, 10*time.Second)

	rec.reset()
	require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
	assert.Equal(t, []string{"Start", "Done"}, rec.hooks(), "nothing held: nothing released")
	assert.Equal(t, redlock.OutcomeNotHeld, rec.of("Done")[0].result.Outcome)
	assert.Zero(t, rec.of("Done")[0].result.Attempts, "nothing sent")
}

// The read-write lock's holds, the multi-name lock and an idempotency
// Store's lock report as their own primitives, under the name the user gave.
func TestObserverSeesEachPrimitive(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, rec := observedSet(t, servers)
	rw := rs.NewRWMutex("catalog")
	require.NoError(t, rw.RLockContext(t.Context()))
	require.NoError(t, rw.RUnlockContext(t.Context()))
	require.NoError(t, rw.TryLockContext(t.Context()))
	require.NoError(t, rw.UnlockContext(t.Context()))
	multi := rs.NewMultiMutex([]string{"acct:7", "acct:3"})
	require.NoError(t, multi.LockContext(t.Context()))
	require.NoError(t, multi.UnlockContext(t.Context()))
	_, _, err := idempotency.New(rs).Do(t.Context(), "order-7", []byte("r"), func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	require.NoError(t, err)
	var calls []redlock.Call
	for _, d := range rec.of("Done") {
		require.NoError(t, d.result.Err)
		calls = append(calls, d.call)
	}
	assert.Equal(t, []redlock.Call{
		{Op: redlock.OpLock, Primitive: "rwmutex.read", Name: "catalog"},
		{Op: redlock.OpUnlock, Primitive: "rwmutex.read", Name: "catalog"},
		{Op: redlock.OpTryLock, Primitive: "rwmutex.write", Name: "catalog"},
		{Op: redlock.OpUnlock, Primitive: "rwmutex.write", Name: "catalog"},
		{Op: redlock.OpLock, Primitive: "multi", Name: "acct:3 + acct:7"},
		{Op: redlock.OpUnlock, Primitive: "multi", Name: "acct:3 + acct:7"},
		{Op: redlock.OpTryLock, Primitive: "idempotency", Name: "idempotency:order-7"},
		{Op: redlock.OpUnlock, Primitive: "idempotency", Name: "idempotency:order-7"},
	}, calls)
	assert.Len(t, rec.of("Released"), 4, "each unlock ended an acquisition")
}

// Work that overran its validity shows as a negative validity left. The
// set's clock is a fake one moved past the validity; the keys, under a 1h
// TTL, are still there.
func TestObserverSeesTheValidityOverrun(t *testing.T) {
	servers := redistest.Start(t, 3)
	fake := clock.NewFake(time.Now())
	rs, rec := observedSet(t, servers, redlock.WithClock(longTimersOnFake{fake}))
	m := rs.NewMutex("overrun", mutex.WithTTL(time.Hour))
	require.NoError(t, m.LockContext(t.Context()))
	fake.Advance(2 * time.Hour) // the work runs an hour past Until
	require.NoError(t, m.UnlockContext(t.Context()))
	rel := rec.await(t, "Released", 1, nil)[0]
	assert.InDelta(t, -time.Hour, rel.release.ValidityLeft, float64(time.Minute))
	assert.Equal(t, 2*time.Hour, rel.release.Held)
}

// Contention: a TryLock refused by a holder is held, one attempt; a waiting
// LockContext is reported as waiting from the first refusal until it
// obtains the lock, and counts its attempts.
func TestObserverSeesContentionAndWaiters(t *testing.T) {
	servers := redistest.Start(t, 3)
	// Without passes: the waiter, of the same Redlock, goes through the nodes.
	rs, rec := observedSet(t, servers, redlock.WithoutLocalHandoff())
	holder := rs.NewMutex("contended")
	require.NoError(t, holder.LockContext(t.Context()))

	require.ErrorIs(t, rs.NewMutex("contended").TryLockContext(t.Context()), mutex.ErrNotObtained)
	tried := rec.await(t, "Done", 2, nil)[1]
	assert.Equal(t, redlock.OpTryLock, tried.call.Op)
	assert.Equal(t, redlock.OutcomeBusy, tried.result.Outcome)
	assert.Equal(t, 1, tried.result.Attempts)
	assert.Empty(t, rec.of("WaitStart"), "a TryLock does not wait")

	done := make(chan error, 1)
	go func() { done <- rs.NewMutex("contended").LockContext(t.Context()) }()
	started := rec.await(t, "WaitStart", 1, nil)[0]
	assert.Equal(t, redlock.Call{Op: redlock.OpLock, Primitive: "mutex", Name: "contended"}, started.call)
	assert.Empty(t, rec.of("WaitStop"), "still waiting")
	require.NoError(t, holder.UnlockContext(t.Context()))
	require.NoError(t, <-done)
	assert.Len(t, rec.await(t, "WaitStop", 1, nil), 1)
	// The waiter may be woken, and done, before the holder's unlock reports.
	dones := rec.await(t, "Done", 4, nil)[2:]
	obtained := dones[0]
	if obtained.call.Op != redlock.OpLock {
		obtained = dones[1]
	}
	assert.Equal(t, redlock.OpLock, obtained.call.Op)
	assert.Equal(t, redlock.OutcomeObtained, obtained.result.Outcome)
	assert.GreaterOrEqual(t, obtained.result.Attempts, 2, "refused first, then obtained")
	hooks := rec.hooks("Start", "Done", "Released")
	assert.Equal(t, []string{"WaitStart", "WaitStop"}, hooks)

	// A wait that ends with ctx is reported as canceled, and stops waiting.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	other := rs.NewMutex("contended")
	require.ErrorIs(t, other.LockContext(ctx), context.DeadlineExceeded)
	assert.Len(t, rec.of("WaitStop"), 2)
	last := rec.of("Done")
	assert.Equal(t, redlock.OutcomeCanceled, last[len(last)-1].result.Outcome)
}

// A call whose ctx ends while it waits for its turn behind another attempt
// of this process on the same name sent nothing: the observer is told of 0
// attempts (a review saw 1).
func TestObserverCountsNoAttemptForACallThatWaitedItsTurn(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, rec := observedSet(t, servers) // a per-node timeout of 1s
	for _, s := range servers[1:] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	first := make(chan error, 1)
	go func() { first <- rs.NewMutex("turn").TryLockContext(t.Context()) }()
	require.Eventually(t, func() bool { return servers[0].Do(t, "EXISTS", "turn").(int64) == 1 }, 5*time.Second, time.Millisecond,
		"the first attempt reached node 0, and waits for the paused ones")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := rs.NewMutex("turn").LockContext(ctx)
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, <-first, mutex.ErrNodesUnavailable)
	done := rec.of("Done")
	require.Len(t, done, 2)
	assert.Equal(t, redlock.OpLock, done[0].call.Op, "the second call ended first")
	assert.Zero(t, done[0].result.Attempts, "nothing sent")
	assert.Equal(t, 1, done[1].result.Attempts)
}
