package otelquorumlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/otelquorumlock"
	"github.com/quorumlock/quorumlock/redlock"
)

// longTimersOnFake reads the time of a fake clock and runs long timers (10s
// and more: the quarantine's end) on it, short ones (per-node deadlines) on
// real time.
type longTimersOnFake struct{ *clock.Fake }

func (c longTimersOnFake) NewTimer(d time.Duration) clock.Timer {
	if d < 10*time.Second {
		return clock.Real().NewTimer(d)
	}
	return c.Fake.NewTimer(d)
}

// signalled wraps f (which may be nil) so that every call also sends on the
// returned channel; the first 64 calls are kept, later ones dropped, so that
// a hook never blocks the goroutine that calls it.
func signalled[T any](f func(T)) (func(T), <-chan T) {
	c := make(chan T, 64)
	return func(v T) {
		if f != nil {
			f(v)
		}
		select {
		case c <- v:
		default:
		}
	}, c
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
		panic("unreachable")
	}
}

func port(s *redistest.Server) attribute.KeyValue { return attribute.Int("server.port", s.Port()) }

// Young nodes are quarantined at first contact, and leave when it ends; a
// node restarted later is quarantined again; Close takes the set's nodes out.
func TestQuarantineIsAnUpDownCounterPerNode(t *testing.T) {
	servers := redistest.Start(t, 3)
	tm := newTelemetry(t)
	o := tm.observer()
	var left <-chan string
	o.QuarantineLeave, left = signalled(o.QuarantineLeave)
	enter := o.QuarantineEnter
	entered := make(chan string, 16) // a node enters at most once per quarantine: 4 in all
	o.QuarantineEnter = func(node string, until time.Time) { enter(node, until); entered <- node }
	fake := clock.NewFake(time.Now())
	rs := lockSet(t, servers, o, redlock.WithClock(longTimersOnFake{fake}), redlock.WithRestartQuarantine(time.Hour))
	m := rs.NewMutex("quarantine")
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrQuarantined, "every node started seconds ago")
	for range servers { // the round ends at the second; the third is told once its INFO is read
		receive(t, entered, "enter")
	}
	q := tm.metric(t, "quorumlock.node.quarantined")
	assert.Equal(t, "{node}", q.Unit)
	for _, s := range servers {
		assert.Equal(t, int64(1), total(q, port(s)), "%s", s.Addr())
	}
	assert.Zero(t, total(tm.metric(t, "quorumlock.node.errors")), "quarantined is not failing")

	fake.Advance(time.Hour)
	for range servers {
		receive(t, left, "leave")
	}
	assert.Zero(t, total(tm.metric(t, "quorumlock.node.quarantined")))
	require.NoError(t, m.TryLockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))

	servers[1].RestartEmpty()
	_ = m.TryLockContext(t.Context()) // the restart is seen, whether or not the lock is obtained
	assert.Equal(t, servers[1].Addr(), receive(t, entered, "enter"))
	q = tm.metric(t, "quorumlock.node.quarantined")
	assert.Equal(t, int64(1), total(q, port(servers[1])))
	assert.Equal(t, int64(1), total(q))
	require.NoError(t, rs.Close())
	assert.Zero(t, total(tm.metric(t, "quorumlock.node.quarantined")), "closed: no node of this set is kept out")
}

// A LockContext waiting for a held lock counts as a waiter until it obtains
// the lock; then the count is back at 0. A Semaphore's AcquireContext is
// one waiter, whatever the permits it queues for.
func TestWaitersGoUpAndBackDown(t *testing.T) {
	servers := redistest.Start(t, 3)
	tm := newTelemetry(t)
	o := tm.observer()
	var started <-chan redlock.Call
	o.WaitStart, started = signalled(o.WaitStart)
	rs := lockSet(t, servers, o)

	holder := rs.NewMutex("report")
	require.NoError(t, holder.LockContext(t.Context()))
	done := make(chan error, 1)
	waiter := rs.NewMutex("report")
	go func() { done <- waiter.LockContext(t.Context()) }()
	receive(t, started, "wait")
	assert.Equal(t, int64(1), total(tm.metric(t, "quorumlock.waiters"), mutexAttr))
	require.NoError(t, holder.UnlockContext(t.Context()))
	require.NoError(t, receive(t, done, "lock"))
	assert.Zero(t, total(tm.metric(t, "quorumlock.waiters")))
	require.NoError(t, waiter.UnlockContext(t.Context()))

	sem := rs.NewSemaphore("exports", 2)
	var permits []*mutex.Permit
	for range 2 {
		p, err := sem.TryAcquireContext(t.Context())
		require.NoError(t, err)
		permits = append(permits, p)
	}
	got := make(chan *mutex.Permit, 1)
	go func() {
		p, err := sem.AcquireContext(t.Context())
		assert.NoError(t, err)
		got <- p
	}()
	receive(t, started, "semaphore wait")
	semAttr := attribute.String("quorumlock.primitive", "semaphore")
	assert.Equal(t, int64(1), total(tm.metric(t, "quorumlock.waiters"), semAttr), "one waiter, queued for both permits")
	require.NoError(t, permits[0].ReleaseContext(t.Context()))
	p := receive(t, got, "permit")
	require.NotNil(t, p)
	assert.Zero(t, total(tm.metric(t, "quorumlock.waiters")))
	n, _ := count(tm.metric(t, "quorumlock.acquire.duration"), semAttr)
	assert.Equal(t, uint64(3), n, "two TryAcquire and one Acquire, not one per permit tried")
	for _, p := range []*mutex.Permit{p, permits[1]} {
		require.NoError(t, p.ReleaseContext(t.Context()))
	}
	n, _ = count(tm.metric(t, "quorumlock.hold.duration"), semAttr)
	assert.Equal(t, uint64(3), n)
}

// With WithLockNameAttribute, the name is an attribute of the call's
// metrics and span, and the span's error status carries the error.
func TestLockNameAttributeIsOptIn(t *testing.T) {
	servers := redistest.Start(t, 3)
	tm := newTelemetry(t)
	rs := lockSet(t, servers, tm.observer(otelquorumlock.WithLockNameAttribute()))
	m := rs.NewMutex("nightly")
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
	require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
	name := attribute.String("quorumlock.name", "nightly")
	n, _ := count(tm.metric(t, "quorumlock.acquire.duration"), name, obtained)
	assert.Equal(t, uint64(1), n)
	n, _ = count(tm.metric(t, "quorumlock.hold.duration"), name)
	assert.Equal(t, uint64(1), n)
	spans := tm.spans.Ended()
	require.Len(t, spans, 3)
	for _, s := range spans {
		assert.True(t, has(attribute.NewSet(s.Attributes()...), []attribute.KeyValue{name}), "%s", s.Name())
	}
	assert.Contains(t, spans[2].Status().Description, `"nightly"`, "the error of the second unlock")
}

// NewObserver() without options records with the global providers.
func TestNewObserverUsesTheGlobalProviders(t *testing.T) {
	tm := newTelemetry(t)
	otel.SetMeterProvider(tm.meters)
	otel.SetTracerProvider(tm.traces)
	t.Cleanup(func() {
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	})
	servers := redistest.Start(t, 3)
	rs := lockSet(t, servers, otelquorumlock.NewObserver())
	m := rs.NewMutex("global")
	require.NoError(t, m.LockContext(context.Background()))
	require.NoError(t, m.UnlockContext(context.Background()))
	n, _ := count(tm.metric(t, "quorumlock.acquire.duration"), obtained, mutexAttr)
	assert.Equal(t, uint64(1), n)
	assert.Len(t, tm.spans.Ended(), 2)
}
