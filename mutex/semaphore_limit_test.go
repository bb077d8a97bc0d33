package mutex_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
)

// The nodes keep a semaphore's limit while any of its permits lives: a
// semaphore asking for another limit on the name is refused as bad input,
// takes nothing, and is not reported as a node failure or as held; once the
// permits are gone, the record expires and a new limit is accepted.
func TestSemaphoreLimitMismatchIsRefused(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	const record = "jobs:quorumlock:limit"
	opts := []mutex.Option{mutex.WithTTL(300 * time.Millisecond), mutex.WithAutoExtend()}
	three, four := rs.NewSemaphore("jobs", 3, opts...), rs.NewSemaphore("jobs", 4, opts...)

	p, err := three.AcquireContext(t.Context())
	require.NoError(t, err)
	three.Settle() // an acquisition returns at a majority; the last node's reply may still be on its way
	for i := range b.admin {
		assert.Equal(t, "3", b.get(t, i, record), "node %d keeps the limit", i)
	}
	permits := func() int {
		keys, err := b.admin[0].Keys(t.Context(), "jobs:quorumlock:permit:?").Result()
		require.NoError(t, err)
		return len(keys)
	}

	refused := func(t *testing.T, s *mutex.Semaphore, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		for call, f := range map[string]func(context.Context) (*mutex.Permit, error){
			"TryAcquireContext": s.TryAcquireContext, "AcquireContext": s.AcquireContext,
		} {
			got, err := f(ctx)
			assert.Nil(t, got, call)
			require.ErrorIs(t, err, mutex.ErrInvalid, call)
			assert.ErrorIs(t, err, mutex.ErrNotObtained, call)
			assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, call)
			var ne *mutex.NodeError
			assert.False(t, errors.As(err, &ne), call)
			assert.EqualError(t, err, want, call)
			assert.NoError(t, ctx.Err(), "%s returned at once, without waiting", call)
		}
	}
	refused(t, four, `mutex: semaphore "jobs" has limit 3 on the nodes, this one asks for 4: every holder must use the same limit`)
	assert.Equal(t, 1, permits(), "the refused semaphore took no permit")
	in, err := rs.Inspect(t.Context(), "jobs")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1, "the record is no lock")
	assert.Equal(t, "permit", in.Locks[0].Kind)
	assert.NotEmpty(t, in.Locks[0].Holder)

	q, err := rs.NewSemaphore("jobs", 3, opts...).TryAcquireContext(t.Context())
	require.NoError(t, err, "the same limit is accepted")
	// Held through renewals, the record lives on with the permits.
	select {
	case <-p.Lost():
		t.Fatal(p.LostCause())
	case <-time.After(600 * time.Millisecond):
	}
	refused(t, four, `mutex: semaphore "jobs" has limit 3 on the nodes, this one asks for 4: every holder must use the same limit`)
	require.NoError(t, p.ReleaseContext(t.Context()))
	require.NoError(t, q.ReleaseContext(t.Context()))

	// Drained: the record expires within a TTL, then another limit holds.
	require.Eventually(t, func() bool {
		for i := range b.admin {
			if b.get(t, i, record) != "" {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
	p, err = four.TryAcquireContext(t.Context())
	require.NoError(t, err)
	refused(t, three, `mutex: semaphore "jobs" has limit 4 on the nodes, this one asks for 3: every holder must use the same limit`)
	require.NoError(t, p.ReleaseContext(t.Context()))
}

// Another limit on a minority of the nodes (what a rolled-back attempt of a
// refused semaphore leaves) refuses there like a holder: no holder of
// that limit can exist, so a semaphore of the limit the majority keeps
// gets the ordinary errors, and its permits.
func TestSemaphoreLimitOnAMinorityIsNoMismatch(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	const record = "q:quorumlock:limit"
	sem := rs.NewSemaphore("q", 1, mutex.WithTTL(time.Minute))
	holder, err := sem.TryAcquireContext(t.Context())
	require.NoError(t, err)
	sem.Settle() // it returns at a majority: node 2's acquire may still be on its way
	require.NoError(t, b.admin[2].Set(t.Context(), record, "2", time.Minute).Err())
	// Node 1 lost the permit: no outcome is known before node 2 answers.
	require.NoError(t, b.admin[1].Del(t.Context(), "q:quorumlock:permit:0").Err())

	other := rs.NewSemaphore("q", 1, mutex.WithTTL(time.Minute))
	_, err = other.TryAcquireContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	assert.NotErrorIs(t, err, mutex.ErrInvalid, "held, not a mismatch: %v", err)

	require.NoError(t, holder.ReleaseContext(t.Context()))
	p, err := other.TryAcquireContext(t.Context())
	require.NoError(t, err, "granted by the majority that keeps limit 1")
	require.NoError(t, p.ReleaseContext(t.Context()))
}
