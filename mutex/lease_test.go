package mutex_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The lease tests run the Mutex on backoffClock: the watcher's long sleeps
// (TTL 1h, so a renewal every 20 minutes) are on a fake clock the test
// advances, while every network round keeps its real per-node deadline. So
// fake.BlockUntil(1) returns exactly when the watcher is asleep again, after
// any round it started has finished.

const leaseTTL = time.Hour

func leaseSet(t *testing.T, b *backend, opts ...redlock.Option) (*redlock.Redlock, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Now())
	return b.set(t, append([]redlock.Option{redlock.WithClock(backoffClock{fake})}, opts...)...), fake
}

// asleep waits until the renewals of m's set sleep on the fake clock, any
// renewal they started counted.
func asleep(t *testing.T, m *mutex.Mutex) {
	t.Helper()
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		m.SettleRenewals()
	}()
	select {
	case <-settled:
	case <-time.After(10 * time.Second):
		t.Fatal("the renewals never went back to sleep")
	}
}

// asleepOrLost waits as asleep does and reports whether the lease is still
// there (false: Lost closed).
func asleepOrLost(t *testing.T, m *mutex.Mutex) bool {
	t.Helper()
	asleep(t, m)
	return !closed(m.Lost())
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestAutoExtendRenewsEveryThirdOfTheTTL(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs, fake := leaseSet(t, b)
		m := rs.NewMutex("renew", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		for i := range 3 {
			asleep(t, m)
			for _, c := range b.admin {
				require.NoError(t, c.PExpire(t.Context(), "renew", 10*time.Second).Err()) // time has passed on the nodes
			}
			before := m.Until()
			fake.Advance(leaseTTL / 3)
			asleep(t, m) // the renewal round is over
			assert.True(t, m.Until().After(before), "renewal %d moved Until", i)
			m.Settle()
			for n := range 3 {
				assert.Greater(t, b.pttl(t, n, "renew"), 59*time.Minute, "renewal %d reset the TTL on node %d", i, n)
			}
		}
		assert.False(t, closed(m.Lost()))
		require.NoError(t, m.UnlockContext(t.Context()))
		assert.False(t, closed(m.Lost()), "a normal Unlock is not a loss")
		assert.NoError(t, m.LostCause())
	})
}

func TestLostAtOnceWhenTheTokenIsGone(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs, fake := leaseSet(t, b)
		m := rs.NewMutex("gone", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		asleep(t, m)
		b.del(t, "gone") // the keys expired, or were taken over
		fake.Advance(leaseTTL / 3)
		select {
		case <-m.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("Lost was not closed after a renewal found the token gone")
		}
		require.ErrorIs(t, m.LostCause(), mutex.ErrLost)
		require.ErrorIs(t, m.LostCause(), mutex.ErrNotHeld)
		assert.True(t, m.Until().IsZero())
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
	})
}

// A majority of nodes disappears mid-lease: renewals fail, are retried, and
// Lost is closed before the validity ends, so the work can stop before another
// owner can get in.
func TestLostBeforeValidityEndsWhenMajorityDisappears(t *testing.T) {
	b := realBackend(t, 5)
	rs, fake := leaseSet(t, b, redlock.WithNodeTimeout(100*time.Millisecond))
	m := rs.NewMutex("majority-gone", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	until := m.Until()
	for _, i := range []int{0, 2, 4} {
		b.real[i].Pause()
	}
	attempts := 0
	for asleepOrLost(t, m) {
		attempts++
		require.Less(t, attempts, 50, "Lost was never closed")
		fake.Advance(leaseTTL / 3 / 4) // renewal due, or the next retry
	}
	assert.True(t, fake.Now().Before(until), "Lost came before the validity ended (at %v, until %v)", fake.Now(), until)
	cause := m.LostCause()
	require.ErrorIs(t, cause, mutex.ErrLost)
	require.ErrorIs(t, cause, mutex.ErrNodesUnavailable)
	var ne *mutex.NodeError // which nodes failed, and why (review 13: none was named)
	require.ErrorAs(t, cause, &ne, "%v", cause)
	assert.Contains(t, []string{b.addrs[0], b.addrs[2], b.addrs[4]}, ne.Node)
	assert.ErrorIs(t, ne, mutex.ErrNodeTimeout)
	assert.Greater(t, attempts, 2, "renewals were retried before giving up")
	for _, i := range []int{0, 2, 4} {
		b.real[i].Resume()
	}
	require.NoError(t, m.UnlockContext(t.Context()), "the keys were still there; the release goes through")
}

func TestMaxExtendsCapsRenewals(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs, fake := leaseSet(t, b)
		m := rs.NewMutex("capped", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend(), mutex.WithMaxExtends(2))
		require.NoError(t, m.LockContext(t.Context()))
		var untils []time.Time
		for range 2 {
			asleep(t, m)
			fake.Advance(leaseTTL / 3)
			asleep(t, m)
			untils = append(untils, m.Until())
		}
		assert.True(t, untils[1].After(untils[0]), "two renewals happened")
		// No third renewal: the next wake-up is the loss deadline.
		fake.Advance(untils[1].Sub(fake.Now()) - leaseTTL/10)
		select {
		case <-m.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("Lost was not closed at the end of the capped lease")
		}
		assert.Equal(t, untils[1], m.Until(), "no third renewal")
		assert.ErrorContains(t, m.LostCause(), "WithMaxExtends")
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

// Without WithAutoExtend, Lost still closes before the validity ends, and a
// manual ExtendContext moves that moment.
func TestLostWithoutAutoExtendFollowsManualExtensions(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs, fake := leaseSet(t, b)
		m := rs.NewMutex("manual", mutex.WithTTL(leaseTTL))
		require.NoError(t, m.LockContext(t.Context()))
		lost := m.Lost()
		asleep(t, m)
		fake.Advance(leaseTTL / 2)
		require.NoError(t, m.ExtendContext(t.Context()))
		asleep(t, m)
		fake.Advance(leaseTTL / 2) // past the first deadline, not the new one
		asleep(t, m)
		assert.False(t, closed(lost), "the manual extension moved the deadline")
		fake.Advance(leaseTTL)
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("Lost was not closed before the validity ended")
		}
		assert.ErrorIs(t, m.LostCause(), mutex.ErrLost)
		require.NoError(t, m.UnlockContext(t.Context()), "the nodes' keys live on real time: still there")
	})
}

// scriptLog is a go-redis hook that records, per client, the lock scripts it
// sent, alone or in pipelines, in order: "release" (the release script, the
// one with four keys) or "acquire/extend" (any other).
type scriptLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			l.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (l *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.record(cmd)
		return next(ctx, cmd)
	}
}

func (l *scriptLog) record(cmd redis.Cmder) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return
	}
	kind := "acquire/extend"
	if args := cmd.Args(); len(args) > 2 && fmt.Sprint(args[2]) == "4" {
		kind = "release"
	}
	l.mu.Lock()
	l.sent = append(l.sent, kind)
	l.mu.Unlock()
}

// UnlockContext stops the renewals and waits for one in flight, so no
// extension is ever sent after the release, even to a node whose extension is
// still hanging.
func TestNoRenewalAfterUnlock(t *testing.T) {
	b := realBackend(t, 3)
	for _, c := range b.clients { // scripts loaded, so every call is one EVALSHA
		require.NoError(t, c.Ping(t.Context()).Err())
	}
	logs := make([]*scriptLog, 3)
	for i, c := range b.clients {
		logs[i] = &scriptLog{}
		c.(*redis.Client).AddHook(logs[i])
	}
	baseline := goleak.IgnoreCurrent()
	rs, fake := leaseSet(t, b, redlock.WithNodeTimeout(100*time.Millisecond))
	m := rs.NewMutex("no-late-renewal", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	m.Settle()
	b.real[0].Pause() // node 0's extension will hang
	asleep(t, m)
	fake.Advance(leaseTTL / 3)
	asleep(t, m) // renewed on nodes 1 and 2; node 0's extension still in flight
	require.NoError(t, m.UnlockContext(t.Context()))
	fake.Advance(leaseTTL) // a watcher still running would renew now
	b.real[0].Resume()
	m.Settle()
	for i, l := range logs {
		l.mu.Lock()
		sent := slices.Clone(l.sent)
		l.mu.Unlock()
		require.NotEmpty(t, sent)
		assert.Equal(t, "release", sent[len(sent)-1], "node %d: the release was the last script sent: %v", i, sent)
		assert.Contains(t, sent[1:], "acquire/extend", "node %d was sent a renewal", i)
	}
	assert.False(t, closed(m.Lost()))
	assert.Zero(t, b.present(t, "no-late-renewal"))
	goleak.VerifyNone(t, baseline)
}

// One paused node of five must not cost a short lease anything (README: "a
// paused or slow minority costs nothing"). Its one-second round trip, ended
// by the client's read timeout, once set the derived per-node timeout for
// every node (8 times the slowest's round trip, up to 500ms): renewals then
// waited on the paused node longer than the lease had left, and a TTL of
// 500ms was lost about 1.2s in although four nodes answered throughout.
func TestAPausedMinorityDoesNotLoseAShortLease(t *testing.T) {
	servers := redistest.Start(t, 5)
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.ReadTimeout = time.Second })
	}
	rs := newSet(t, clients) // the derived per-node timeout
	const ttl = 500 * time.Millisecond
	m := rs.NewMutex("paused-minority", mutex.WithTTL(ttl), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	servers[0].Pause()
	defer servers[0].Resume()
	// Past two of the paused node's read timeouts, which is when the lease was lost.
	end := time.After(2500 * time.Millisecond)
	lastUntil := m.Until()
	for moved := 0; ; {
		select {
		case <-m.Lost():
			t.Fatalf("lost with one node of five paused: %v", m.LostCause())
		case <-end:
			assert.Greater(t, moved, 5, "renewals moved Until")
			servers[0].Resume()
			require.NoError(t, m.UnlockContext(t.Context()))
			return
		case <-time.After(ttl / 3):
			if u := m.Until(); u.After(lastUntil) {
				moved, lastUntil = moved+1, u
			}
		}
	}
}

// A renewal that has its majority but still waits for a paused node it
// asked to put a missing key back (with a per-node timeout longer than the
// lease has left) extends the lease at the loss deadline instead of losing
// it: the validity dates from the majority's answers.
func TestARenewalWithItsMajorityIsNotLostWaitingForAPausedNode(t *testing.T) {
	b := realBackend(t, 5)
	rs := newSet(t, b.clients, redlock.WithNodeTimeout(5*time.Second))
	const ttl = time.Second
	m := rs.NewMutex("renewal-waits", mutex.WithTTL(ttl), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	b.real[0].Pause()
	defer b.real[0].Resume()
	first := m.Until()
	select {
	case <-m.Lost():
		t.Fatalf("lost with one node of five paused: %v", m.LostCause())
	case <-time.After(5 * ttl / 2):
	}
	assert.True(t, m.Until().After(first.Add(ttl)), "renewals moved Until past the first TTL")
	b.real[0].Resume()
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A plain lock that nobody watched tells the truth at the first poll after
// its loss deadline: Done and Lost are closed when they return, the cause
// says the validity ran out (it once took a goroutine blocked on Lost).
func TestAPollAfterTheValidityEndedSeesTheLoss(t *testing.T) {
	for _, poll := range []string{"Done", "Lost"} {
		t.Run(poll, func(t *testing.T) {
			b := realBackend(t, 3)
			rs, fake := leaseSet(t, b)
			m := rs.NewMutex("unwatched-"+poll, mutex.WithTTL(leaseTTL))
			require.NoError(t, m.LockContext(t.Context()))
			fake.Advance(leaseTTL)
			ch := m.Done()
			if poll == "Lost" {
				ch = m.Lost()
			}
			assert.True(t, closed(ch), "%s is closed at the first poll", poll)
			assert.True(t, closed(m.Lost()))
			assert.ErrorIs(t, m.LostCause(), mutex.ErrLost)
			assert.ErrorContains(t, m.LostCause(), "nothing extended it")
		})
	}
}

// pausedClock is backoffClock on which the time can jump without any timer
// firing: a process paused (SIGSTOP, a stopped VM) past its validity sees
// the time moved before its goroutines run.
type pausedClock struct {
	backoffClock
	jump *atomic.Int64
}

func (c pausedClock) Now() time.Time                  { return c.backoffClock.Now().Add(time.Duration(c.jump.Load())) }
func (c pausedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// A lease renewed automatically, whose process resumes after its validity
// ended, is lost at the first look: Lost and Done closed, ExtendContext
// ErrNotHeld with nothing sent (it returned nil and re-armed a lock whose
// Lost had closed), before the renewer's goroutine runs again.
func TestAPausedHolderSeesItsLeaseLostAtTheFirstLook(t *testing.T) {
	b := realBackend(t, 3)
	jump := &atomic.Int64{}
	rs := b.set(t, redlock.WithClock(pausedClock{backoffClock{clock.NewFake(time.Now())}, jump}))
	m := rs.NewMutex("paused-holder", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))
	asleep(t, m)
	jump.Store(int64(leaseTTL)) // no timer fires: the renewer sleeps on
	assert.True(t, closed(m.Done()), "Done at the first look")
	assert.True(t, closed(m.Lost()))
	require.ErrorIs(t, m.LostCause(), mutex.ErrLost)
	err := m.ExtendContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotHeld)
	require.ErrorIs(t, err, mutex.ErrLost)
	assert.True(t, m.Until().IsZero() || !m.Until().After(time.Now().Add(leaseTTL)), "nothing re-armed it")
}

// A plain lock past its loss deadline is not extended: Lost has closed.
func TestNoExtendAfterTheLossDeadline(t *testing.T) {
	b := realBackend(t, 3)
	rs, fake := leaseSet(t, b)
	m := rs.NewMutex("extend-after-loss", mutex.WithTTL(leaseTTL))
	require.NoError(t, m.LockContext(t.Context()))
	m.Settle()
	fake.Advance(leaseTTL - leaseTTL/20) // past Until - TTL/10, before Until
	err := m.ExtendContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotHeld)
	assert.ErrorContains(t, err, "nothing sent")
	assert.True(t, closed(m.Lost()))
	assert.True(t, closed(m.Done()))
}
