package mutex_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// tokenRecorder is a go-redis hook that records the token argument of every
// lock script a client sends, alone or in a pipeline (EVALSHA/EVAL sha
// numkeys key... token ...), and whether the script was a release (its
// third argument names the release's mode).
type tokenRecorder struct {
	mu     sync.Mutex
	tokens []sentToken
}

type sentToken struct {
	token   string
	release bool
}

func (r *tokenRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *tokenRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (r *tokenRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}

func (r *tokenRecorder) record(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 4 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	keys, _ := strconv.Atoi(fmt.Sprint(args[2]))
	if 3+keys >= len(args) {
		return
	}
	sent := sentToken{token: fmt.Sprint(args[3+keys])}
	if 5+keys < len(args) {
		switch fmt.Sprint(args[5+keys]) {
		case "retry", "leave", "release":
			sent.release = true
		}
	}
	r.mu.Lock()
	r.tokens = append(r.tokens, sent)
	r.mu.Unlock()
}

// Every attempt of one LockContext call draws its own token, so a release of
// an attempt that was rolled back, delivered late, can never delete the lock
// a later attempt of the same call obtained.
func TestEveryAttemptHasItsOwnToken(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		warm := b.set(t).NewMutex("warm") // load the scripts, so each call is one EVALSHA
		require.NoError(t, warm.LockContext(t.Context()))
		require.NoError(t, warm.UnlockContext(t.Context()))
		warm.Settle()
		var rec tokenRecorder
		b.clients[2].(*redis.Client).AddHook(&rec)
		// Another owner holds nodes 0 and 1, so every attempt takes node 2,
		// fails, and rolls node 2 back.
		for _, c := range b.admin[:2] {
			require.NoError(t, c.Set(t.Context(), "per-attempt", "other", time.Minute).Err())
		}
		m := b.set(t).NewMutex("per-attempt", mutex.WithTries(4), mutex.WithRetryDelay(time.Millisecond, 2*time.Millisecond))
		require.ErrorIs(t, m.LockContext(t.Context()), mutex.ErrNotObtained)
		m.Settle()
		b.del(t, "per-attempt")
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()

		rec.mu.Lock()
		defer rec.mu.Unlock()
		acquires := map[string]int{} // token -> acquires sent with it
		releases := map[string]int{} // token -> releases sent with it
		for _, sent := range rec.tokens {
			if sent.release {
				releases[sent.token]++
			} else {
				acquires[sent.token]++
			}
		}
		// An attempt decided before its command to node 2 left withdraws
		// it: node 2 sees at most the 4 failed attempts and the winner. A
		// last attempt whose acquire was withdrawn still sends a release,
		// to leave its place in the node's queue of waiters.
		assert.GreaterOrEqual(t, len(acquires), 2)
		assert.LessOrEqual(t, len(acquires), 5)
		assert.Equal(t, 1, acquires[m.Value()], "the winning token was sent to acquire once")
		assert.Zero(t, releases[m.Value()], "the winning token was never sent to roll back")
		for tok, n := range acquires {
			assert.Equal(t, 1, n, "token %s was sent to acquire by more than one attempt", tok)
			if tok != m.Value() {
				assert.Equal(t, 1, releases[tok], "a failed attempt's acquire was rolled back once")
			}
		}
		for tok, n := range releases {
			assert.LessOrEqual(t, n, 1, "token %s was released more than once", tok)
		}
	})
}

// resent is a go-redis hook that sends every release twice while on, as a
// client that re-sent the command after a lost reply would: the caller sees
// the second reply.
type resent struct{ on atomic.Bool }

func (r *resent) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *resent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r *resent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); r.on.Load() && len(args) > 2 && fmt.Sprint(args[2]) == "4" {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// Unlock returns nil only when no other owner can have held the lock since
// we obtained it. A release of ours that ran twice (the client re-sent it
// after a lost reply) still counts: the tombstone the first copy left says
// so. A key gone for any other reason (deleted, evicted, lost in a restart)
// does not, within the validity as after it: another owner may have held
// the lock meanwhile.
func TestUnlockOfAKeyAlreadyGone(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		fake := clock.NewFake(time.Now())
		rs := b.set(t, redlock.WithClock(fake))
		m := rs.NewMutex("gone", mutex.WithTTL(10*time.Second))
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context())) // the scripts are loaded now

		var hooks []*resent
		for _, c := range b.clients {
			h := &resent{}
			c.(*redis.Client).AddHook(h)
			hooks = append(hooks, h)
		}
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		for _, h := range hooks {
			h.on.Store(true)
		}
		require.NoError(t, m.UnlockContext(t.Context()), "our own release, run twice")
		for _, h := range hooks {
			h.on.Store(false)
		}

		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		b.del(t, "gone") // lost, within the validity
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)

		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		fake.Advance(time.Until(m.Until()) + time.Second) // the validity ends
		b.del(t, "gone")                                  // and the keys expire
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
	})
}

// A Mutex holds its acquisition until UnlockContext, even after the validity
// ended: a second LockContext is refused, so a late Unlock by the code that
// overran can never release an acquisition made since by other code sharing
// the Mutex.
func TestExpiredAcquisitionStillNeedsUnlock(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		fake := clock.NewFake(time.Now())
		m := b.set(t, redlock.WithClock(fake)).NewMutex("overrun", mutex.WithTTL(time.Second))
		require.NoError(t, m.LockContext(t.Context()))
		fake.Advance(2 * time.Second) // the holder overran its validity

		err := m.LockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrAlreadyHeld)
		assert.Contains(t, err.Error(), "validity ended")
		require.NoError(t, m.UnlockContext(t.Context()), "the keys were still there (the nodes' clocks did not move)")
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

// TryLockContext returns when its ctx ends even if the rollback of a partial
// acquisition could wait much longer for slow nodes.
func TestTryLockHonoursContextDuringRollback(t *testing.T) {
	b := realBackend(t, 3)
	b.real[0].Pause()
	b.real[1].Pause()
	m := b.set(t, redlock.WithNodeTimeout(5*time.Second)).NewMutex("ctx-rollback")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	var err error
	within(t, 2*time.Second, func() { err = m.TryLockContext(ctx) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	b.real[0].Resume()
	b.real[1].Resume()
	m.Settle()
	assert.Zero(t, b.present(t, "ctx-rollback"))
}

// The largest retry delays are accepted and do not overflow the backoff.
func TestHugeRetryDelaysDoNotPanic(t *testing.T) {
	b := miniBackend(t, 1)
	rs := b.set(t)
	require.NoError(t, rs.NewMutex("huge-delay").LockContext(t.Context()))
	m := rs.NewMutex("huge-delay", mutex.WithRetryDelay(math.MaxInt64, math.MaxInt64))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, m.LockContext(ctx), context.DeadlineExceeded)
}
