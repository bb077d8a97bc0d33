package mutex_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// passBlock is how many fencing numbers an acquisition of a Mutex reserves
// beyond its own, for the holders it may pass to: the counter written back
// is its token plus passBlock.
const passBlock = 8

// waitStarts returns an observer counting the waits of LockContext calls: a
// call counts once it may receive a pass, before it sleeps.
func waitStarts() (*redlock.Observer, *atomic.Int32) {
	var n atomic.Int32
	return &redlock.Observer{WaitStart: func(redlock.Call) { n.Add(1) }}, &n
}

// outcomes has o record, in order, each call's op, outcome and attempts.
func outcomes(o *redlock.Observer) func() []string {
	var mu sync.Mutex
	var seen []string
	o.Done = func(_ context.Context, c redlock.Call, r redlock.Result) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s %s %d", c.Op, r.Outcome, r.Attempts))
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// scriptsRun is how many scripts the nodes have run so far, in all.
func scriptsRun(b *backend) int64 {
	var n int64
	for i := range b.real {
		n += b.scripts(i)
	}
	return n
}

// An Unlock with another caller of the same Redlock waiting on the name
// passes the lock to it without a command to any node: the receiver gets
// the giver's token and Until (never later), a larger fencing token, and
// its release on the nodes leaves no key and no place in the queues; the
// next acquisition elsewhere gets a larger fencing token still. With
// WithoutLocalHandoff, the lock goes through the nodes.
func TestUnlockPassesToAWaiterOfTheSameRedlock(t *testing.T) {
	b := realBackend(t, 3)
	for _, tc := range []struct {
		name   string
		opts   []redlock.Option
		passes bool
	}{{"default", nil, true}, {"WithoutLocalHandoff", []redlock.Option{redlock.WithoutLocalHandoff()}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "pass-" + tc.name
			o, waits := waitStarts()
			seen := outcomes(o)
			// The fake clock stands still, so the pass is within the time bound
			// however slow this machine is.
			rs := b.set(t, append([]redlock.Option{redlock.WithClock(clock.NewFake(time.Now())), redlock.WithObserver(o)}, tc.opts...)...)
			giver := rs.NewMutex(name, mutex.WithFencing())
			require.NoError(t, giver.LockContext(t.Context()))
			token, fence, until := giver.Value(), giver.FencingToken(), giver.Until()
			receiver := rs.NewMutex(name, mutex.WithFencing())
			got := make(chan error, 1)
			go func() { got <- receiver.LockContext(t.Context()) }()
			require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
			giver.Settle()
			before := scriptsRun(b)

			require.NoError(t, giver.UnlockContext(t.Context()))
			require.NoError(t, <-got)
			if !tc.passes {
				receiver.Settle()
				assert.Greater(t, scriptsRun(b), before)
				require.NoError(t, receiver.UnlockContext(t.Context()))
				return
			}
			assert.Equal(t, before, scriptsRun(b), "a pass sends nothing to the nodes")
			assert.ElementsMatch(t, []string{"lock obtained 1", "unlock released 1", "lock obtained 0"}, seen(),
				"observers see a release and an acquisition without a round")
			assert.Equal(t, token, receiver.Value())
			assert.Greater(t, receiver.FencingToken(), fence)
			assert.False(t, receiver.Until().After(until), "a pass never extends the validity")
			select {
			case <-giver.Done():
			default:
				t.Fatal("the giver's hold did not end")
			}
			require.NoError(t, receiver.UnlockContext(t.Context()))
			receiver.Settle()
			assert.Zero(t, b.present(t, name), "the key is released on every node")
			for i := range b.admin {
				assert.Zero(t, b.admin[i].ZCard(t.Context(), name+":quorumlock:q").Val(), "node %d keeps a place in the queue", i)
			}
			next := newSet(t, redistest.Clients(t, b.real)).NewMutex(name, mutex.WithFencing())
			require.NoError(t, next.TryLockContext(t.Context()))
			assert.Greater(t, next.FencingToken(), receiver.FencingToken())
			require.NoError(t, next.UnlockContext(t.Context()))
		})
	}
}

// Passes stop after 8 in a row, or once 5ms have gone by since the nodes
// granted the lock: the lock is then released on the nodes, and a waiter
// of another Redlock (its own clients: another process), queued there
// before the callers of the first, gets it next.
func TestPassesAreBoundedThenTheNodesQueueDecides(t *testing.T) {
	b := realBackend(t, 3)
	for _, tc := range []struct {
		name    string
		advance time.Duration // the fake clock moves this much during each hold
		locals  int           // turns of the first Redlock's callers before the other's
	}{{"count", 0, 8}, {"time", 3 * time.Millisecond, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bounded-" + tc.name
			// Ahead of the other Redlock's clock: the tickets of this one's
			// callers, taken later, must be larger (the nodes' queue is
			// first come, first served by ticket).
			fake := clock.NewFake(time.Now().Add(time.Minute))
			o, waits := waitStarts()
			rs := b.set(t, redlock.WithClock(fake), redlock.WithObserver(o))
			holder := rs.NewMutex(name)
			require.NoError(t, holder.LockContext(t.Context()))

			var mu sync.Mutex
			var order []string
			turn := func(who string) {
				mu.Lock()
				order = append(order, who)
				mu.Unlock()
			}
			ro, remoteWaits := waitStarts()
			remote := newSet(t, redistest.Clients(t, b.real), redlock.WithObserver(ro)).NewMutex(name)
			var wg sync.WaitGroup
			wg.Go(func() {
				if assert.NoError(t, remote.LockContext(t.Context())) {
					turn("remote")
					assert.NoError(t, remote.UnlockContext(t.Context()))
				}
			})
			require.Eventually(t, func() bool { return remoteWaits.Load() == 1 }, 10*time.Second, time.Millisecond)
			const callers = 10
			for range callers {
				m := rs.NewMutex(name)
				wg.Go(func() {
					if assert.NoError(t, m.LockContext(t.Context())) {
						turn("local")
						fake.Advance(tc.advance)
						assert.NoError(t, m.UnlockContext(t.Context()))
					}
				})
			}
			require.Eventually(t, func() bool { return waits.Load() == callers }, 10*time.Second, time.Millisecond)
			require.NoError(t, holder.UnlockContext(t.Context()))
			// An attempt that fails for another reason than the lock being
			// taken backs off on rs's clock, which only this test moves: a
			// call left that way is let go on after 2s without news (CI
			// once hung here for 8 minutes, two local callers asleep).
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for waited := 0; ; waited++ {
				require.Less(t, waited, 30, "the callers did not finish")
				select {
				case <-done:
				case <-time.After(2 * time.Second):
					fake.Advance(time.Second)
					continue
				}
				break
			}
			require.Len(t, order, callers+1)
			for i := range tc.locals {
				assert.Equal(t, "local", order[i], "turn %d: %v", i, order)
			}
			assert.Equal(t, "remote", order[tc.locals], "%v", order)
		})
	}
}

// A waiter whose ctx has ended is passed nothing: the lock goes to the
// next waiter in line, or to the nodes; and a waiter that leaves returns
// ctx's error, never holding.
func TestAWaiterThatGaveUpIsPassedNothing(t *testing.T) {
	b := realBackend(t, 3)
	o, waits := waitStarts()
	rs := b.set(t, redlock.WithClock(clock.NewFake(time.Now())), redlock.WithObserver(o))
	giver := rs.NewMutex("gave-up")
	require.NoError(t, giver.LockContext(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	first := rs.NewMutex("gave-up")
	firstErr := make(chan error, 1)
	go func() { firstErr <- first.LockContext(ctx) }()
	require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
	second := rs.NewMutex("gave-up")
	secondErr := make(chan error, 1)
	go func() { secondErr <- second.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return waits.Load() == 2 }, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, giver.UnlockContext(t.Context()))
	require.ErrorIs(t, <-firstErr, context.Canceled)
	require.NoError(t, <-secondErr)
	assert.True(t, first.Until().IsZero(), "the waiter that gave up holds nothing")
	require.NoError(t, second.UnlockContext(t.Context()))
	second.Settle()
	assert.Zero(t, b.present(t, "gave-up"))
}

// A receiver with WithAutoExtend holds a lease, as after an acquisition:
// the renewer extends it (Until moves) and Lost stays open; a giver
// without auto-extension passes it all the same.
func TestAPassedLockIsRenewedWithAutoExtend(t *testing.T) {
	b := realBackend(t, 3)
	fake := clock.NewFake(time.Now())
	o, waits := waitStarts()
	rs := b.set(t, redlock.WithClock(fake), redlock.WithObserver(o))
	const ttl = time.Second
	giver := rs.NewMutex("lease-pass", mutex.WithTTL(ttl))
	require.NoError(t, giver.LockContext(t.Context()))
	receiver := rs.NewMutex("lease-pass", mutex.WithTTL(ttl), mutex.WithAutoExtend())
	pass(t, giver, receiver, waits)
	until := receiver.Until()
	for range 3 { // three renewals, each due a third of the TTL after the last
		asleep(t, receiver) // the next renewal is armed on the fake clock before it moves
		fake.Advance(ttl/3 + time.Millisecond)
		require.Eventually(t, func() bool { return receiver.Until().After(until) }, 10*time.Second, time.Millisecond, "not renewed")
		until = receiver.Until()
	}
	select {
	case <-receiver.Lost():
		t.Fatalf("lost: %v", receiver.LostCause())
	default:
	}
	require.NoError(t, receiver.UnlockContext(t.Context()))
}

// pass has receiver wait for the lock (waits counts its wait) and giver
// pass it over with its UnlockContext.
func pass(t *testing.T, giver, receiver *mutex.Mutex, waits *atomic.Int32) {
	t.Helper()
	got := make(chan error, 1)
	go func() { got <- receiver.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, giver.UnlockContext(t.Context()))
	require.NoError(t, <-got)
	require.Equal(t, giver.Value(), receiver.Value(), "passed, not acquired")
}

// A passed lock extends as its giver's would: the nodes that answered the
// giver's acquisition late hold the token too, and with no renewal of the
// giver in flight nothing can have put a key back there, so their answers
// count for the receiver. The giver took the lock while 2 of 5 nodes were
// paused (they ran its acquire once resumed); then one of its 3 holders is
// paused, and the receiver's ExtendContext succeeds on the other 4. Review
// 25: every node that was not a holder was suspect to the receiver, and its
// ExtendContext then failed "its time ran out" (no sentinel) in 24 of 30
// passes with every node up, as soon as one of those answered among the
// first three.
func TestAPassedLockExtendsOnTheGiversLateNodes(t *testing.T) {
	b := realBackend(t, 5)
	o, waits := waitStarts()
	rs := b.set(t, redlock.WithClock(clock.NewFake(time.Now())), redlock.WithObserver(o))
	for _, s := range b.real[3:] {
		s.Pause()
	}
	giver := rs.NewMutex("extend-pass", mutex.WithTTL(time.Minute))
	require.NoError(t, giver.LockContext(t.Context()))
	for _, s := range b.real[3:] {
		s.Resume()
	}
	giver.Settle()
	require.Equal(t, 5, b.holders(t, "extend-pass", giver.Value()), "the late nodes ran the acquire")
	receiver := rs.NewMutex("extend-pass", mutex.WithTTL(time.Minute))
	pass(t, giver, receiver, waits)

	b.real[0].Pause() // one of the giver's holders, which answered first
	t.Cleanup(b.real[0].Resume)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, receiver.ExtendContext(ctx), "extended on nodes 1 to 4")
	b.real[0].Resume()
	require.NoError(t, receiver.UnlockContext(t.Context()))
}

// Close while callers pass the lock among themselves: every call returns,
// and no key is left on any node, wherever a pass stood.
func TestCloseDuringPasses(t *testing.T) {
	b := realBackend(t, 3)
	rs := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second))
	var acquired, passes atomic.Int32
	var tokens sync.Map
	var wg sync.WaitGroup
	for range 4 {
		m := rs.NewMutex("close-pass")
		wg.Go(func() {
			for m.LockContext(t.Context()) == nil {
				acquired.Add(1)
				if _, seen := tokens.LoadOrStore(m.Value(), true); seen {
					passes.Add(1)
				}
				if m.UnlockContext(t.Context()) != nil {
					return
				}
			}
		})
	}
	require.Eventually(t, func() bool { return acquired.Load() >= 50 && passes.Load() > 0 }, 30*time.Second, time.Millisecond)
	rs.Close()
	wg.Wait()
	for i := range b.admin {
		assert.Zero(t, b.admin[i].Exists(t.Context(), "close-pass").Val(), "node %d: the key was left behind", i)
	}
}

// A lock is passed only with at least half its TTL of validity left: with a
// drift allowance of 45% (validity 53ms of a 100ms TTL), it is passed at
// once, and no longer 4ms later (49ms left), though the time bound (5ms)
// would still allow it. The fake clock makes the validity exact.
func TestNoPassWithLessThanHalfTheTTLLeft(t *testing.T) {
	b := realBackend(t, 3)
	for _, tc := range []struct {
		name    string
		advance time.Duration
		passed  bool
	}{{"53ms-left", 0, true}, {"49ms-left", 4 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "half-" + tc.name
			fake := clock.NewFake(time.Now())
			o, waits := waitStarts()
			rs := b.set(t, redlock.WithClock(fake), redlock.WithObserver(o), redlock.WithDriftFactor(0.45))
			giver := rs.NewMutex(name, mutex.WithTTL(100*time.Millisecond))
			require.NoError(t, giver.LockContext(t.Context()))
			token := giver.Value()
			receiver := rs.NewMutex(name, mutex.WithTTL(100*time.Millisecond))
			got := make(chan error, 1)
			go func() { got <- receiver.LockContext(t.Context()) }()
			require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
			fake.Advance(tc.advance)
			_ = giver.UnlockContext(t.Context()) // on the nodes, the keys may have expired (real time)
			require.NoError(t, <-got)
			assert.Equal(t, tc.passed, receiver.Value() == token, "passed")
			_ = receiver.UnlockContext(t.Context())
		})
	}
}

// A receiver without auto-extension is warned as after an acquisition:
// Lost closes at Until minus TTL/10, the giver's Until, and not before.
func TestAPassedLockIsLostBeforeTheGiversUntil(t *testing.T) {
	b := realBackend(t, 3)
	fake := clock.NewFake(time.Now())
	o, waits := waitStarts()
	rs := b.set(t, redlock.WithClock(fake), redlock.WithObserver(o))
	const ttl = 10 * time.Second
	giver := rs.NewMutex("lost-pass", mutex.WithTTL(ttl))
	require.NoError(t, giver.LockContext(t.Context()))
	until := giver.Until()
	receiver := rs.NewMutex("lost-pass", mutex.WithTTL(ttl))
	got := make(chan error, 1)
	go func() { got <- receiver.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, giver.UnlockContext(t.Context()))
	require.NoError(t, <-got)
	require.Equal(t, giver.Value(), receiver.Value(), "passed")
	lost := receiver.Lost()
	fake.Advance(until.Add(-ttl/10).Sub(fake.Now()) - time.Millisecond)
	select {
	case <-lost:
		t.Fatal("lost before Until - TTL/10")
	case <-time.After(50 * time.Millisecond):
	}
	fake.Advance(2 * time.Millisecond)
	select {
	case <-lost:
		require.ErrorIs(t, receiver.LostCause(), mutex.ErrLost)
	case <-time.After(10 * time.Second):
		t.Fatal("Lost did not close at Until - TTL/10")
	}
	_ = receiver.UnlockContext(t.Context())
}

// A Mutex resumed from a handle is never passed: the handle carries the
// holder's fencing token, not how many numbers of its block are left, so
// its waiters get the lock from the nodes, with a number above the block.
func TestAResumedMutexIsNotPassed(t *testing.T) {
	b := realBackend(t, 3)
	original := b.set(t).NewMutex("resumed-pass", mutex.WithFencing())
	require.NoError(t, original.LockContext(t.Context()))
	h, err := original.Handle()
	require.NoError(t, err)
	o, waits := waitStarts()
	rs := b.set(t, redlock.WithClock(clock.NewFake(time.Now())), redlock.WithObserver(o))
	resumed, err := rs.ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	waiter := rs.NewMutex("resumed-pass", mutex.WithFencing())
	got := make(chan error, 1)
	go func() { got <- waiter.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, resumed.UnlockContext(t.Context()))
	require.NoError(t, <-got)
	assert.NotEqual(t, original.Value(), waiter.Value(), "passed")
	assert.Greater(t, waiter.FencingToken(), original.FencingToken()+passBlock)
	require.NoError(t, waiter.UnlockContext(t.Context()))
}

// A Mutex whose handle was taken is never passed either: the process that
// resumed it holds the same acquisition, and a pass here would make two
// owners (the resumed side's Extend would still succeed). Its waiter gets
// the lock from the nodes once the giver released it there.
func TestAMutexWithAHandleIsNotPassed(t *testing.T) {
	b := realBackend(t, 3)
	o, waits := waitStarts()
	rs := b.set(t, redlock.WithClock(clock.NewFake(time.Now())), redlock.WithObserver(o))
	giver := rs.NewMutex("handle-pass", mutex.WithFencing())
	require.NoError(t, giver.LockContext(t.Context()))
	h, err := giver.Handle()
	require.NoError(t, err)
	resumed, err := b.set(t).ResumeMutex(t.Context(), h)
	require.NoError(t, err)
	waiter := rs.NewMutex("handle-pass", mutex.WithFencing())
	got := make(chan error, 1)
	go func() { got <- waiter.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return waits.Load() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, giver.UnlockContext(t.Context()))
	require.NoError(t, <-got)
	assert.NotEqual(t, giver.Value(), waiter.Value(), "passed while a resumed Mutex holds it")
	assert.Greater(t, waiter.FencingToken(), giver.FencingToken()+passBlock)
	require.ErrorIs(t, resumed.ExtendContext(t.Context()), mutex.ErrNotHeld, "the resumed side learns that the lock is gone")
	require.NoError(t, waiter.UnlockContext(t.Context()))
}
