package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A TTL the library cannot keep is bad input for every lock type, at every
// call, with nothing sent: it is not accepted and then lost at once.
func TestTTLsThatCannotBeKeptAreInvalid(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	lease := "below the smallest TTL a lease can be renewed within, 100ms"
	tests := []struct {
		name string
		opts []mutex.Option
		want string
	}{
		{"4ms lease", []mutex.Option{mutex.WithTTL(4 * time.Millisecond), mutex.WithAutoExtend()}, lease},
		{"99ms lease", []mutex.Option{mutex.WithTTL(99 * time.Millisecond), mutex.WithAutoExtend()}, lease},
		{"9ms lock", []mutex.Option{mutex.WithTTL(9*time.Millisecond + 900*time.Microsecond)}, "below the smallest TTL a lock can be kept for, 10ms"},
		{"100ms lease renewed too late", []mutex.Option{mutex.WithTTL(100 * time.Millisecond), mutex.WithAutoExtend(), mutex.WithExtendInterval(40 * time.Millisecond)},
			"could not wait 50ms for its answers before the loss deadline"},
	}
	before := make([]int64, len(b.real))
	for i := range b.real {
		before[i] = b.scripts(i)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := rs.NewMutex("ttl", tt.opts...)
			multi := rs.NewMultiMutex([]string{"ttl:a", "ttl:b"}, tt.opts...)
			sem := rs.NewSemaphore("ttl:sem", 3, tt.opts...)
			rw := rs.NewRWMutex("ttl:rw", tt.opts...)
			for call, f := range map[string]func(context.Context) error{
				"Mutex.LockContext": m.LockContext, "Mutex.TryLockContext": m.TryLockContext,
				"Mutex.ExtendContext": m.ExtendContext, "Mutex.UnlockContext": m.UnlockContext,
				"multi LockContext": multi.LockContext, "multi TryLockContext": multi.TryLockContext,
				"RLockContext": rw.RLockContext, "RWMutex.LockContext": rw.LockContext, "TryRLockContext": rw.TryRLockContext,
				"AcquireContext":    func(ctx context.Context) error { _, err := sem.AcquireContext(ctx); return err },
				"TryAcquireContext": func(ctx context.Context) error { _, err := sem.TryAcquireContext(ctx); return err },
			} {
				err := f(t.Context())
				require.ErrorIs(t, err, mutex.ErrInvalid, call)
				assert.ErrorContains(t, err, tt.want, call)
			}
		})
	}
	// Nothing was sent: with WithRedisDo, redlock.Check's INFO would count.
	for i := range b.real {
		assert.Equal(t, before[i], b.scripts(i), "node %d ran no script", i)
		assert.Zero(t, b.admin[i].DBSize(t.Context()).Val(), "node %d holds no key", i)
	}
}

// A restart quarantine shorter than a lock's TTL would let a node that
// forgot the lock count again while the lock is valid: two owners. Such a
// lock is bad input at every call, nothing sent; a TTL up to the quarantine
// is accepted.
func TestTTLLongerThanTheRestartQuarantineIsInvalid(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t, redlock.WithRestartQuarantine(5*time.Second))
	before := make([]int64, len(b.real))
	for i := range b.real {
		before[i] = b.scripts(i)
	}
	long := mutex.WithTTL(8 * time.Second)
	m := rs.NewMutex("q", long)
	sem := rs.NewSemaphore("q:sem", 2, long)
	rw := rs.NewRWMutex("q:rw", long)
	for call, f := range map[string]func(context.Context) error{
		"Mutex.LockContext": m.LockContext, "Mutex.TryLockContext": m.TryLockContext,
		"RWMutex.RLockContext": rw.RLockContext,
		"AcquireContext":       func(ctx context.Context) error { _, err := sem.AcquireContext(ctx); return err },
	} {
		err := f(t.Context())
		require.ErrorIs(t, err, mutex.ErrInvalid, call)
		assert.ErrorContains(t, err, "TTL 8s is longer than the restart quarantine, 5s", call)
	}
	for i := range b.real {
		assert.Equal(t, before[i], b.scripts(i), "node %d ran no script", i)
	}
	err := rs.NewMutex("q", mutex.WithTTL(5*time.Second)).TryLockContext(t.Context())
	assert.NotErrorIs(t, err, mutex.ErrInvalid, "a TTL equal to the quarantine is accepted")
}

// The smallest TTLs accepted are kept: a 10ms lock is obtained with
// validity left, and a 100ms lease is held through many renewals without
// being lost, on real servers.
func TestSmallestTTLsAreKept(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t, redlock.WithNodeTimeout(0)) // the derived one: 50ms for these TTLs

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	m := rs.NewMutex("ttl:min", mutex.WithTTL(mutex.MinTTL))
	require.NoError(t, m.LockContext(ctx), "an attempt with validity left comes within 10s")
	assert.False(t, m.Until().IsZero())
	if err := m.UnlockContext(t.Context()); err != nil {
		assert.ErrorIs(t, err, mutex.ErrNotHeld, "or it expired first")
	}

	// A stall of this process or of the nodes longer than the renewal
	// window (about 50ms at this TTL) loses a lease, as it should, and a
	// shared, loaded machine has such stalls now and then (3 losses in about
	// 150 holds here, at load 5 to 9); a TTL under the minimum is lost every
	// time. So one of three leases must keep through ~12 renewals.
	lease := rs.NewMutex("ttl:lease", mutex.WithTTL(mutex.MinLeaseTTL), mutex.WithAutoExtend())
	for try := range 3 {
		require.NoError(t, lease.LockContext(ctx))
		first := lease.Until()
		select {
		case <-lease.Lost():
			t.Logf("try %d: lost: %v", try, lease.LostCause())
			// Found gone: ErrNotHeld. Lost for want of time or answers, the
			// keys may still be ours: a release a majority confirms is nil,
			// as in TestLostBeforeValidityEndsWhenMajorityDisappears.
			if err := lease.UnlockContext(t.Context()); err != nil || errors.Is(lease.LostCause(), mutex.ErrNotHeld) {
				assert.ErrorIs(t, err, mutex.ErrNotHeld)
			}
			continue
		case <-time.After(400 * time.Millisecond):
		}
		assert.True(t, lease.Until().After(first.Add(250*time.Millisecond)), "renewed: Until moved from %v to %v", first, lease.Until())
		require.NoError(t, lease.UnlockContext(t.Context()))
		assert.NoError(t, lease.LostCause())
		return
	}
	t.Fatal("three leases of the smallest TTL were lost")
}
