package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestLockSetsTheSeedPatternOnAMajority(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("resource:lock", mutex.WithTTL(30*time.Second))
		require.NoError(t, m.LockContext(t.Context()))
		returned := time.Now()
		assert.Equal(t, "resource:lock", m.Name())
		assert.Equal(t, "resource:lock", m.Key(), "without a prefix the key is exactly the name")
		assert.Len(t, m.Value(), 26)
		m.Settle()
		assert.Equal(t, 5, b.holders(t, "resource:lock", m.Value()), "every healthy node took it")
		for i := range 5 {
			pttl := b.pttl(t, i, "resource:lock")
			assert.LessOrEqual(t, pttl, 30*time.Second, "PX is the TTL in milliseconds")
			assert.Greater(t, pttl, 29*time.Second)
		}
		// validity = ttl - elapsed - (ttl*0.01 + 2ms), counted from the majority's answers
		assert.False(t, m.Until().After(returned.Add(30*time.Second-300*time.Millisecond-2*time.Millisecond)))
		assert.True(t, m.Until().After(time.Now()))

		require.NoError(t, m.UnlockContext(t.Context()))
		assert.True(t, m.Until().IsZero())
		m.Settle()
		assert.Zero(t, b.present(t, "resource:lock"))
	})
}

func TestTokensAreFreshPerAcquisition(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("fresh")
		seen := map[string]bool{}
		for range 50 {
			require.NoError(t, m.LockContext(t.Context()))
			require.False(t, seen[m.Value()], "token reused")
			seen[m.Value()] = true
			require.NoError(t, m.UnlockContext(t.Context()))
		}
	})
}

func TestKeyPrefixAppliesToAcquireExtendAndRelease(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs := b.set(t, redlock.WithKeyPrefix("locks:"))
		m := rs.NewMutex("job")
		require.NoError(t, m.LockContext(t.Context()))
		assert.Equal(t, "locks:job", m.Key())
		assert.GreaterOrEqual(t, b.holders(t, "locks:job", m.Value()), 2)
		assert.Zero(t, b.present(t, "job"))
		require.NoError(t, m.ExtendContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
		m.Settle()
		assert.Zero(t, b.present(t, "locks:job"), "release used the prefix too")
	})
}

func TestSecondOwnerIsRefusedAsHeldNotAsUnavailable(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		rs := b.set(t)
		a, other := rs.NewMutex("orders:42"), rs.NewMutex("orders:42")
		require.NoError(t, a.LockContext(t.Context()))
		err := other.TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		var ne *mutex.NodeError
		assert.False(t, errors.As(err, &ne), "no node failed: %v", err)
		assert.Contains(t, err.Error(), "held by another owner")
		assert.True(t, other.Until().IsZero())
		assert.ErrorIs(t, other.UnlockContext(t.Context()), mutex.ErrNotHeld)
		a.Settle()
		other.Settle()
		owner := b.holders(t, "orders:42", a.Value())
		assert.GreaterOrEqual(t, owner, 3, "the loser's rollback left the owner's keys intact")
		assert.Equal(t, owner, b.present(t, "orders:42"), "the loser left no key of its own")
	})
}

func TestMutualExclusionManyGoroutines(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) { testMutualExclusion(t, miniBackend(t, 5), 4, 25) })
	t.Run("redis-server", func(t *testing.T) { testMutualExclusion(t, realBackend(t, 5), 16, 25) })
}

// testMutualExclusion runs workers goroutines, each with its own Mutex on one
// name, each taking the lock rounds times, and fails on any overlap.
func testMutualExclusion(t *testing.T, b *backend, workers, rounds int) {
	rs := b.set(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var inside, overlaps, total atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			m := rs.NewMutex("shared", mutex.WithTTL(5*time.Second), mutex.WithRetryDelay(time.Millisecond, 8*time.Millisecond))
			for range rounds {
				if err := m.LockContext(ctx); err != nil {
					t.Errorf("lock: %v", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				total.Add(1)
				inside.Add(-1)
				if err := m.UnlockContext(ctx); err != nil {
					t.Errorf("unlock: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load())
	assert.Equal(t, int32(workers*rounds), total.Load())
}

func TestMinorityDownStillLocks(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		b.kill(0)
		b.kill(3)
		m := b.set(t).NewMutex("minority-down")
		within(t, time.Second, func() { require.NoError(t, m.TryLockContext(t.Context())) })
		within(t, time.Second, func() { require.NoError(t, m.ExtendContext(t.Context())) })
		within(t, time.Second, func() { require.NoError(t, m.UnlockContext(t.Context())) })
	})
}

func TestMajorityDownIsNodesUnavailable(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		down := map[string]bool{}
		for _, i := range []int{0, 2, 4} {
			b.kill(i)
			down[b.addrs[i]] = true
		}
		m := b.set(t, redlock.WithNodeTimeout(0)).NewMutex("majority-down") // derived: 80ms
		var err error
		within(t, time.Second, func() { err = m.TryLockContext(t.Context()) })
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		var merr *multierror.Error
		require.ErrorAs(t, err, &merr)
		failed := map[string]bool{}
		for _, e := range merr.Errors {
			var ne *mutex.NodeError
			require.ErrorAs(t, e, &ne)
			failed[ne.Node] = true
		}
		assert.Equal(t, down, failed, "exactly the dead nodes are reported")
		assert.Zero(t, b.present(t, "majority-down", 1, 3), "the partial acquisition was rolled back")
	})
}

func TestExtendResetsTTLInsteadOfAdding(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("extend", mutex.WithTTL(10*time.Second))
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		for _, c := range b.admin {
			require.NoError(t, c.PExpire(t.Context(), "extend", 3*time.Second).Err()) // time has passed
		}
		before := m.Until()
		require.NoError(t, m.ExtendContext(t.Context()))
		assert.True(t, m.Until().After(before))
		m.Settle()
		for i := range 3 {
			pttl := b.pttl(t, i, "extend")
			assert.LessOrEqual(t, pttl, 10*time.Second, "set to the TTL, not added to what was left")
			assert.Greater(t, pttl, 9*time.Second)
		}
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

func TestExtendAndUnlockAfterLossLeaveNewOwnerIntact(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		rs := b.set(t)
		old := rs.NewMutex("lost", mutex.WithTTL(time.Second))
		require.NoError(t, old.LockContext(t.Context()))
		old.Settle()
		b.del(t, "lost") // the old owner's keys expire
		owner := rs.NewMutex("lost", mutex.WithTTL(time.Minute))
		require.NoError(t, owner.LockContext(t.Context()))
		owner.Settle()

		err := old.ExtendContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotHeld)
		assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		assert.True(t, old.Until().IsZero())
		require.ErrorIs(t, old.UnlockContext(t.Context()), mutex.ErrNotHeld)
		old.Settle()
		assert.Equal(t, 5, b.holders(t, "lost", owner.Value()))
		for i := range 5 {
			assert.Greater(t, b.pttl(t, i, "lost"), 50*time.Second, "extend never touched the new owner's TTL")
		}
		require.NoError(t, owner.UnlockContext(t.Context()))
	})
}

func TestUnlockTwiceAndExtendAfterUnlock(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("twice")
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld, "never locked")
		require.ErrorIs(t, m.ExtendContext(t.Context()), mutex.ErrNotHeld, "never locked")
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
		require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld)
		require.ErrorIs(t, m.ExtendContext(t.Context()), mutex.ErrNotHeld)
	})
}

func TestLockOnHeldMutexIsRefusedWithoutTouchingNodes(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("held")
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		token, until := m.Value(), m.Until()
		before := b.scripts(0)
		err := m.LockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrAlreadyHeld)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrAlreadyHeld)
		assert.Equal(t, before, b.scripts(0))
		assert.Equal(t, token, m.Value())
		assert.Equal(t, until, m.Until())
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

func TestConcurrentCallsOnOneMutex(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("shared-mutex")
		var ok, held atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				err := m.TryLockContext(t.Context())
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, mutex.ErrAlreadyHeld):
					held.Add(1)
				default:
					t.Errorf("unexpected: %v", err)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), ok.Load())
		assert.Equal(t, int32(7), held.Load())
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

func TestCancellationDuringWait(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		fake := clock.NewFake(time.Now())
		rs := b.set(t, redlock.WithClock(fake))
		holder := rs.NewMutex("wait")
		require.NoError(t, holder.LockContext(t.Context()))
		// On the fake clock the waiter's backoff never ends by itself: only
		// cancellation can end LockContext.
		waiter := rs.NewMutex("wait", mutex.WithRetryDelay(time.Hour, time.Hour))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- waiter.LockContext(ctx) }()
		require.NoError(t, fake.BlockUntil(t.Context(), 1)) // the waiter is in an attempt or its backoff
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("LockContext ignored cancellation")
		}
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		waiter.Settle()
		holder.Settle()
		held := b.holders(t, "wait", holder.Value())
		assert.GreaterOrEqual(t, held, 2, "the holder keeps its majority")
		assert.Equal(t, held, b.present(t, "wait"), "the cancelled waiter left no key")
		require.NoError(t, holder.UnlockContext(t.Context()))
	})
}

func TestDeadlineDuringWaitMatchesBothCauses(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs := b.set(t)
		require.NoError(t, rs.NewMutex("deadline").LockContext(t.Context()))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := rs.NewMutex("deadline", mutex.WithRetryDelay(time.Hour, time.Hour)).LockContext(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		assert.Contains(t, err.Error(), "held by another owner", "the last attempt's cause is kept")
	})
}

func TestCancelledContextSendsNothing(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("cancelled")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		before := b.scripts(0)
		err := m.LockContext(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.ErrorIs(t, m.TryLockContext(ctx), context.Canceled)
		assert.Equal(t, before, b.scripts(0))
		assert.Zero(t, b.present(t, "cancelled"))
	})
}

func TestUnlockWithCancelledContextStillReleases(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("cancelled-unlock")
		require.NoError(t, m.LockContext(t.Context()))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		// The release is sent although ctx is done. The call does not wait
		// for it: unless a majority had confirmed it by the time the call
		// looked (nil), it returns ctx's error and keeps the acquisition.
		err := m.UnlockContext(ctx)
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
			assert.NotErrorIs(t, err, mutex.ErrNotHeld)
			assert.NotZero(t, m.Until(), "still held, for a retry to confirm")
		}
		m.Settle()
		assert.Zero(t, b.present(t, "cancelled-unlock"), "released in the background")
		if err != nil {
			require.NoError(t, m.UnlockContext(t.Context()), "a retry confirms the release")
		}
	})
}

func TestTriesLimitsAttempts(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs := b.set(t)
		holder := rs.NewMutex("tries")
		// Every node runs the acquire and the release script, so each call
		// below is one EVALSHA: a release that replaces an acquire withdrawn
		// unsent (to keep the caller's place alike on every node) included.
		require.NoError(t, holder.LockContext(t.Context()))
		require.NoError(t, holder.UnlockContext(t.Context()))
		require.NoError(t, holder.LockContext(t.Context()))
		holder.Settle()
		m := rs.NewMutex("tries", mutex.WithTries(3), mutex.WithRetryDelay(time.Millisecond, 2*time.Millisecond))
		before := make([]int64, 3)
		for i := range before {
			before[i] = b.scripts(i)
		}
		err := m.LockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		assert.NotErrorIs(t, err, context.Canceled)
		assert.Equal(t, 3, m.Attempts())
		m.Settle()
		if b.real != nil { // miniredis counts every command, not only scripts
			// Each attempt reached a majority; a node's command still queued
			// in this process when the attempt was decided is withdrawn, and
			// a release that keeps the caller's place goes instead.
			var all int64
			for i := range before {
				calls := b.scripts(i) - before[i]
				assert.LessOrEqual(t, calls, int64(3), "node %d: three acquire attempts at most, nothing to roll back", i)
				all += calls
			}
			assert.GreaterOrEqual(t, all, int64(3*2), "each attempt reached a majority")
		}
	})
}

func TestSingleNodeIsTheSingleInstanceLock(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, b *backend) {
		rs := b.set(t)
		a, other := rs.NewMutex("resource:lock"), rs.NewMutex("resource:lock")
		require.NoError(t, a.LockContext(t.Context()))
		assert.Equal(t, a.Value(), b.get(t, 0, "resource:lock"))
		require.ErrorIs(t, other.TryLockContext(t.Context()), mutex.ErrNotObtained)
		require.NoError(t, a.UnlockContext(t.Context()))
		assert.Zero(t, b.present(t, "resource:lock"))
		require.NoError(t, other.TryLockContext(t.Context()))
		require.NoError(t, other.UnlockContext(t.Context()))
	})
}

func TestEvenNodeCountNeedsStrictMajority(t *testing.T) {
	onBoth(t, 4, func(t *testing.T, b *backend) {
		rs := b.set(t)
		assert.Equal(t, 3, rs.Quorum())
		// Another owner holds 2 of 4: a 2/2 split must not be a majority.
		for _, c := range b.admin[:2] {
			require.NoError(t, c.Set(t.Context(), "split", "someone-else", time.Minute).Err())
		}
		m := rs.NewMutex("split")
		require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrNotObtained)
		m.Settle()
		assert.Zero(t, b.present(t, "split", 2, 3), "the two keys taken were rolled back")
		assert.Equal(t, "someone-else", b.get(t, 0, "split"))
		require.NoError(t, b.admin[0].Del(t.Context(), "split").Err())
		require.NoError(t, m.TryLockContext(t.Context()))
	})
}

func TestWrongTypeIsANodeErrorNotAnOwner(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		require.NoError(t, b.admin[1].HSet(t.Context(), "typed", "field", "value").Err())
		m := b.set(t).NewMutex("typed")
		require.NoError(t, m.LockContext(t.Context()), "two healthy nodes are a majority")
		require.NoError(t, m.UnlockContext(t.Context()))

		require.NoError(t, b.admin[2].HSet(t.Context(), "typed", "field", "value").Err())
		err := m.TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		var ne *mutex.NodeError
		require.ErrorAs(t, err, &ne)
		assert.Contains(t, ne.Error(), "WRONGTYPE")
		assert.Equal(t, "value", b.admin[1].HGet(t.Context(), "typed", "field").Val(), "nothing overwrote the hash")
	})
}

func TestScriptCacheFlushIsSurvived(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("flush")
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
		for _, c := range b.admin {
			require.NoError(t, c.ScriptFlush(t.Context()).Err())
		}
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.ExtendContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

func TestValidityExhaustedIsNotObtained(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		fake := clock.NewFake(time.Now())
		rs := b.set(t, redlock.WithClock(&advancing{Fake: fake, step: 6 * time.Second}))
		m := rs.NewMutex("slow", mutex.WithTTL(5*time.Second))
		err := m.TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		assert.Contains(t, err.Error(), "leaves no validity")
		assert.True(t, m.Until().IsZero())
		m.Settle()
		assert.Zero(t, b.present(t, "slow"), "the keys taken too late were released")
	})
}

// advancing is a fake clock on which every measured interval lasts at least
// step: each Since moves time forward by step first.
type advancing struct {
	*clock.Fake
	step time.Duration
}

func (a *advancing) Since(t time.Time) time.Duration {
	a.Advance(a.step)
	return a.Fake.Since(t)
}

func TestValidityIsMeasuredOnTheWinningAttempt(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		fake := clock.NewFake(time.Now())
		rs := b.set(t, redlock.WithClock(backoffClock{fake}))
		// A TTL far longer than any real wait here: the holder's keys go
		// only when the test deletes them.
		holder := rs.NewMutex("late", mutex.WithTTL(time.Hour))
		require.NoError(t, holder.LockContext(t.Context()))
		holder.Settle()
		waiter := rs.NewMutex("late", mutex.WithTTL(time.Second), mutex.WithRetryDelay(time.Hour, time.Hour))
		done := make(chan error, 1)
		go func() { done <- waiter.LockContext(t.Context()) }()
		// Failed attempts, with hours of backoff between them...
		for range 3 {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			require.NoError(t, fake.BlockUntil(ctx, 1), "the waiter never slept on the fake clock")
			cancel()
			fake.Advance(time.Hour)
		}
		// ...then the holder's keys expire and the next attempt wins.
		b.del(t, "late")
		expired := fake.Now()
		require.NoError(t, advanceUntil(t, fake, done))
		// Until counts from the start of the attempt that won, after the
		// expiry, not from the first attempt hours earlier.
		assert.True(t, waiter.Until().After(expired.Add(900*time.Millisecond)), "until %v, expired %v", waiter.Until(), expired)
		require.NoError(t, waiter.UnlockContext(t.Context()))
	})
}

func TestBadMutexInputIsRejectedBeforeRedis(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		rs := b.set(t)
		tests := []struct {
			name string
			lock string
			opts []mutex.Option
			want string
		}{
			{"empty name", "", nil, "empty lock name"},
			{"huge name", strings.Repeat("x", mutex.MaxNameLen+1), nil, "longer than"},
			{"zero TTL", "n", []mutex.Option{mutex.WithTTL(0)}, "TTL 0s"},
			{"negative TTL", "n", []mutex.Option{mutex.WithTTL(-time.Second)}, "TTL -1s"},
			{"1ns TTL", "n", []mutex.Option{mutex.WithTTL(time.Nanosecond)}, "under 1ms"},
			{"2ms TTL", "n", []mutex.Option{mutex.WithTTL(2 * time.Millisecond)}, "below the smallest TTL a lock can be kept for, 10ms"},
			{"negative tries", "n", []mutex.Option{mutex.WithTries(-1)}, "negative number of tries"},
			{"zero retry delay", "n", []mutex.Option{mutex.WithRetryDelay(0, time.Second)}, "retry delays"},
			{"inverted retry delays", "n", []mutex.Option{mutex.WithRetryDelay(time.Second, time.Millisecond)}, "retry delays"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				m := rs.NewMutex(tt.lock, tt.opts...)
				before := b.scripts(0)
				for name, call := range map[string]func(context.Context) error{
					"lock": m.LockContext, "trylock": m.TryLockContext, "extend": m.ExtendContext, "unlock": m.UnlockContext,
				} {
					err := call(t.Context())
					require.ErrorIs(t, err, mutex.ErrInvalid, name)
					assert.ErrorContains(t, err, tt.want, name)
					if name == "lock" || name == "trylock" {
						assert.ErrorIs(t, err, mutex.ErrNotObtained, name)
					}
				}
				assert.Equal(t, before, b.scripts(0), "nothing reached Redis")
				assert.Zero(t, b.admin[0].DBSize(t.Context()).Val())
			})
		}
	})
}

func TestHugeTTLWorks(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("forever", mutex.WithTTL(1<<62))
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		assert.Greater(t, b.pttl(t, 0, "forever"), 100*365*24*time.Hour)
		assert.True(t, m.Until().After(time.Now().Add(100*365*24*time.Hour)))
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

// A waiter on a lock of the largest TTL looks again after its retry delay:
// when the holder's keys can expire, plus the drift allowance, is past the
// largest Duration (it wrapped below zero, and the waiter retried at once,
// 1,600 to 2,000 script calls per node in 300ms).
func TestAWaiterOnTheLargestTTLDoesNotSpin(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		holder := b.set(t).NewMutex("forever", mutex.WithTTL(math.MaxInt64))
		require.NoError(t, holder.LockContext(t.Context()))
		holder.Settle()
		waiter := b.set(t).NewMutex("forever", mutex.WithTTL(math.MaxInt64))
		before := b.scripts(0)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		err := waiter.LockContext(ctx)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// An attempt, one more when the subscription is confirmed, fallback
		// looks every 128 to 256ms (half to all of the default RetryMax),
		// and the removal of the waiter's place; miniredis counts every
		// command (pub/sub, pings).
		limit := int64(6)
		if b.mini != nil {
			limit = 100
		}
		assert.LessOrEqual(t, b.scripts(0)-before, limit)
		require.NoError(t, holder.UnlockContext(t.Context()))
	})
}

func TestSubMillisecondTTLIsTruncatedNotRoundedUp(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("trunc", mutex.WithTTL(time.Second+1500*time.Microsecond))
		require.NoError(t, m.LockContext(t.Context()))
		m.Settle()
		for i := range 3 {
			pttl := b.pttl(t, i, "trunc")
			assert.LessOrEqual(t, pttl, 1001*time.Millisecond)
			assert.Greater(t, pttl, 500*time.Millisecond) // not cut to a unit below ms; room for a busy machine
		}
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

// TestSimultaneousTryLocksInOneProcessNeverSplit starts bursts of TryLock
// calls on one name at the same instant, each on a Mutex of its own. Left to
// race, such attempts split the nodes so that often none gets a majority;
// attempts of one process take turns, so exactly one wins each burst and the
// others are told the lock is held by another owner.
func TestSimultaneousTryLocksInOneProcessNeverSplit(t *testing.T) {
	onBoth(t, 5, func(t *testing.T, b *backend) {
		rs := b.set(t)
		const bursts, callers = 20, 10
		for burst := range bursts {
			start := make(chan struct{})
			ms := make([]*mutex.Mutex, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range ms {
				ms[i] = rs.NewMutex("burst")
				wg.Go(func() {
					<-start
					errs[i] = ms[i].TryLockContext(t.Context())
				})
			}
			close(start)
			wg.Wait()
			winners := 0
			for i, err := range errs {
				if err == nil {
					winners++
					require.NoError(t, ms[i].UnlockContext(t.Context()))
					continue
				}
				require.ErrorIs(t, err, mutex.ErrNotObtained)
				require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
			}
			require.Equal(t, 1, winners, "burst %d: %v", burst, errs)
		}
	})
}

// TestAnObtainedLockIsNeverAlreadyExpired: an attempt that takes more than
// half the TTL (replies 170ms late, TTL 300ms) still returns a lock valid
// from now for ttl - elapsed - drift, as the Redlock description counts it:
// Until ahead, Lost open. With Until at the attempt's start plus that
// validity (elapsed counted twice), such a lock came back past its Until,
// Lost closed.
func TestAnObtainedLockIsNeverAlreadyExpired(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	warm := rs.NewMutex("warm") // the scripts loaded: one round trip per attempt
	require.NoError(t, warm.LockContext(t.Context()))
	require.NoError(t, warm.UnlockContext(t.Context()))
	warm.Settle()
	for _, c := range b.clients {
		c.(*redis.Client).AddHook(redistest.SlowReplies(170 * time.Millisecond))
	}
	for i := range 2 {
		m := rs.NewMutex(fmt.Sprintf("slow-%d", i), mutex.WithTTL(300*time.Millisecond))
		start := time.Now()
		require.NoError(t, m.LockContext(t.Context()))
		elapsed := time.Since(start)
		left := time.Until(m.Until())
		assert.Positive(t, left, "returned after %v with Until already past", elapsed)
		assert.False(t, closed(m.Lost()), "Lost closed at return after %v, %v left: %v", elapsed, left, m.LostCause())
		_ = m.UnlockContext(t.Context())
		m.Settle()
	}
}
