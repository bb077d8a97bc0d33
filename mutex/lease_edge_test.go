package mutex_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// slowExtends is a go-redis hook that holds every extension of key (a
// renew script call, alone or in a pipeline) for delay, and signals started
// when the first one begins.
type slowExtends struct {
	key     string // the lock key whose commands are slowed
	delay   time.Duration
	started chan struct{}
	once    sync.Once
}

func (h *slowExtends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowExtends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.extends(cmd) {
				h.hold()
				break
			}
		}
		return next(ctx, cmds)
	}
}

func (h *slowExtends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.extends(cmd) {
			h.hold()
		}
		return next(ctx, cmd)
	}
}

// extends reports whether cmd runs the renew script on h.key: EVAL or
// EVALSHA with one key and three arguments, the last "0" or "1".
func (h *slowExtends) extends(cmd redis.Cmder) bool {
	args := cmd.Args()
	name := cmd.Name()
	if (name != "evalsha" && name != "eval") || len(args) != 7 || args[3] != h.key {
		return false
	}
	return args[6] == "0" || args[6] == "1"
}

func (h *slowExtends) hold() {
	h.once.Do(func() { close(h.started) })
	time.Sleep(h.delay) // a slow network, for this command only
}

// An UnlockContext whose ctx is already cancelled, called while a renewal
// holds the Mutex, still releases: it stops the renewals first instead of
// reporting the Mutex busy and leaving the lock renewed for ever.
func TestUnlockWithCancelledContextDuringRenewal(t *testing.T) {
	b := realBackend(t, 3)
	rs, fake := leaseSet(t, b)
	m := rs.NewMutex("slow-renewal", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	m.Settle()
	hook := &slowExtends{key: "slow-renewal", delay: 300 * time.Millisecond, started: make(chan struct{})}
	for _, c := range b.clients {
		c.(*redis.Client).AddHook(hook)
	}
	asleep(t, m)
	fake.Advance(leaseTTL / 3)
	select {
	case <-hook.started: // the renewal holds the Mutex now
	case <-time.After(10 * time.Second):
		t.Fatal("the renewal never started")
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	// Sent behind the renewal, the release is not confirmed when the call
	// returns: ctx had ended.
	require.ErrorIs(t, m.UnlockContext(cancelled), context.Canceled)
	m.Settle()
	assert.Zero(t, b.present(t, "slow-renewal"))
	assert.False(t, closed(m.Lost()))
	require.NoError(t, m.UnlockContext(t.Context()), "a retry confirms the release")
}

// An UnlockContext whose ctx ends while a manual ExtendContext holds the
// Mutex sends nothing, and leaves the acquisition as it was: still held, and
// still renewed under WithAutoExtend (not merely watched until it expires).
func TestBusyUnlockKeepsTheLeaseRenewed(t *testing.T) {
	b := realBackend(t, 3)
	rs, fake := leaseSet(t, b)
	m := rs.NewMutex("busy-unlock", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	m.Settle()
	asleep(t, m)
	hook := &slowExtends{key: "busy-unlock", delay: 300 * time.Millisecond, started: make(chan struct{})}
	for _, c := range b.clients {
		c.(*redis.Client).AddHook(hook)
	}
	extended := make(chan error, 1)
	go func() { extended <- m.ExtendContext(t.Context()) }()
	select {
	case <-hook.started: // the manual extension holds the Mutex now
	case <-time.After(10 * time.Second):
		t.Fatal("the extension never started")
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	err := m.UnlockContext(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, mutex.ErrNotHeld)
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.NoError(t, <-extended)
	m.Settle()
	assert.Equal(t, 3, b.present(t, "busy-unlock"), "nothing was released")

	asleep(t, m)
	before := m.Until()
	fake.Advance(leaseTTL / 3)
	asleep(t, m) // after the renewal
	assert.True(t, m.Until().After(before), "the automatic renewals go on")
	assert.False(t, closed(m.Lost()))
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A manual ExtendContext that hangs holds the nodes' attention; the renewal
// queued behind it must still close Lost at the loss deadline
// (Until - TTL/10), not after Until, when the manual call finally returns.
func TestLostOnTimeWhileAManualExtendHangs(t *testing.T) {
	b := realBackend(t, 3)
	rs, fake := leaseSet(t, b, redlock.WithNodeTimeout(time.Hour))
	m := rs.NewMutex("hung-extend", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	m.Settle()
	asleep(t, m)
	hook := &slowExtends{key: "hung-extend", delay: 3 * time.Second, started: make(chan struct{})}
	for _, c := range b.clients {
		c.(*redis.Client).AddHook(hook)
	}
	extended := make(chan error, 1)
	go func() { extended <- m.ExtendContext(t.Context()) }()
	select {
	case <-hook.started: // the manual extension holds the Mutex now
	case <-time.After(10 * time.Second):
		t.Fatal("the extension never started")
	}
	until := m.Until()
	fake.Advance(leaseTTL / 3) // the renewal is due; it queues behind the manual extension
	// Three sleepers on the fake clock: the manual extension's round (its
	// node timeout and its deadline), and the renewer, which waits for the
	// renewal until the loss deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, fake.BlockUntil(ctx, 3))
	fake.Advance(until.Add(-leaseTTL / 10).Sub(fake.Now())) // the loss deadline
	select {
	case <-m.Lost():
		assert.ErrorIs(t, m.LostCause(), mutex.ErrLost)
		assert.ErrorContains(t, m.LostCause(), "no renewal was answered by a majority before the validity's end")
	case <-extended:
		t.Fatal("Lost waited for the manual extension")
	case <-time.After(2 * time.Second):
		t.Fatal("Lost did not close at the loss deadline")
	}
	<-extended
	_ = m.UnlockContext(t.Context())
}

// A renewal that starts just before the loss deadline is cut short there:
// Lost closes before the validity ends even when the per-node timeout is
// longer than the safety margin (TTL/10).
func TestLostBeforeUntilWithLongNodeTimeout(t *testing.T) {
	b := realBackend(t, 5)
	rs := b.set(t, redlock.WithNodeTimeout(500*time.Millisecond))
	m := rs.NewMutex("late-loss", mutex.WithTTL(time.Second), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	until := m.Until()
	for _, i := range []int{0, 1, 2} {
		b.real[i].Pause()
	}
	t.Cleanup(func() {
		for _, i := range []int{0, 1, 2} {
			b.real[i].Resume()
		}
	})
	select {
	case <-m.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost never closed")
	}
	lostAt := time.Now()
	assert.True(t, lostAt.Before(until), "Lost closed %v after the validity ended", lostAt.Sub(until))
	if cause := m.LostCause(); !errors.Is(cause, mutex.ErrNodesUnavailable) {
		// On a busy machine the answers of the 2 nodes left may have come
		// unread: then this process's delays are named, and no node.
		require.ErrorContains(t, cause, "the process was paused or starved of CPU")
		t.Logf("on this busy machine: %v", cause)
	}
}

// Lost() and UnlockContext from different goroutines: no data race, and a
// normal Unlock never closes Lost.
func TestLostAndUnlockConcurrently(t *testing.T) {
	b := miniBackend(t, 3)
	rs := b.set(t)
	for range 50 {
		m := rs.NewMutex("lost-race")
		require.NoError(t, m.LockContext(t.Context()))
		var wg sync.WaitGroup
		var lost <-chan struct{}
		wg.Go(func() { lost = m.Lost() })
		require.NoError(t, m.UnlockContext(t.Context()))
		wg.Wait()
		assert.False(t, closed(lost))
	}
}

// After an UnlockContext that could not reach a majority the Mutex still
// holds the lock; renewals have stopped, and Lost still closes before the
// validity ends.
func TestLostStillClosesAfterAFailedUnlock(t *testing.T) {
	b := realBackend(t, 5)
	rs, fake := leaseSet(t, b, redlock.WithNodeTimeout(100*time.Millisecond))
	m := rs.NewMutex("failed-unlock", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	m.Settle()
	for _, i := range []int{0, 2, 4} {
		b.real[i].Pause()
	}
	// The release's per-node timeout runs on the fake clock, and nothing
	// signals when it is armed (the renewal's timer goes as it comes): move
	// the clock on by a timeout at a time until the call returns.
	unlocked := make(chan error, 1)
	go func() { unlocked <- m.UnlockContext(t.Context()) }()
	var err error
	for step := 0; ; step++ {
		require.Less(t, step, 500, "UnlockContext did not return as the fake clock moved on")
		fake.Advance(100 * time.Millisecond)
		select {
		case err = <-unlocked:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	until := m.Until()
	asleep(t, m)
	fake.Advance(until.Sub(fake.Now()) - leaseTTL/10)
	select {
	case <-m.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost never closed")
	}
	assert.ErrorContains(t, m.LostCause(), "nothing extended it")
	for _, i := range []int{0, 2, 4} {
		b.real[i].Resume()
	}
	require.NoError(t, m.UnlockContext(t.Context()), "the retried release goes through")
}

func TestAutoExtendSettingsThatCannotRenewAreRejected(t *testing.T) {
	b := miniBackend(t, 1)
	for name, tt := range map[string]struct {
		opts []redlock.Option
		m    []mutex.Option
	}{
		"interval of 1ns":               {nil, []mutex.Option{mutex.WithAutoExtend(), mutex.WithExtendInterval(time.Nanosecond)}},
		"interval over half the TTL":    {nil, []mutex.Option{mutex.WithAutoExtend(), mutex.WithExtendInterval(6 * time.Second)}},
		"drift leaves no time to renew": {[]redlock.Option{redlock.WithDriftFactor(0.45)}, []mutex.Option{mutex.WithAutoExtend(), mutex.WithExtendInterval(5 * time.Second)}},
		"negative number of extensions": {nil, []mutex.Option{mutex.WithAutoExtend(), mutex.WithMaxExtends(-1)}},
	} {
		t.Run(name, func(t *testing.T) {
			opts := append([]mutex.Option{mutex.WithTTL(10 * time.Second)}, tt.m...)
			err := b.set(t, tt.opts...).NewMutex("bad-lease", opts...).TryLockContext(t.Context())
			require.ErrorIs(t, err, mutex.ErrInvalid)
		})
	}
}
