package mutex_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// closedNow reports whether c is closed.
func closedNow(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// requireClosed fails unless c closes within 5s.
func requireClosed(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}

// Done ends with the hold whichever way it ends, where Lost stays open
// after a normal unlock: a goroutine waiting on Done never outlives a hold.
func TestDoneClosesWhenTheHoldEnds(t *testing.T) {
	b := realBackend(t, 3)

	t.Run("unlock", func(t *testing.T) {
		m := b.set(t).NewMutex("done:unlock", mutex.WithTTL(time.Minute), mutex.WithAutoExtend())
		assert.True(t, closedNow(m.Done()), "nothing held yet: already closed")
		require.NoError(t, m.LockContext(t.Context()))
		done, lost := m.Done(), m.Lost()
		assert.False(t, closedNow(done), "held")
		require.NoError(t, m.UnlockContext(t.Context()))
		assert.True(t, closedNow(done), "closed once UnlockContext returned")
		assert.False(t, closedNow(lost), "a normal unlock does not close Lost")
		assert.NoError(t, m.LostCause())

		require.NoError(t, m.LockContext(t.Context()))
		assert.False(t, closedNow(m.Done()), "a new acquisition gets a new channel")
		require.NoError(t, m.UnlockContext(t.Context()))
	})

	t.Run("found lost", func(t *testing.T) {
		m := b.set(t).NewMutex("done:found", mutex.WithTTL(time.Minute))
		require.NoError(t, m.LockContext(t.Context()))
		done := m.Done()
		b.del(t, "done:found")
		require.ErrorIs(t, m.ExtendContext(t.Context()), mutex.ErrNotHeld)
		assert.True(t, closedNow(done))
		assert.ErrorIs(t, m.LostCause(), mutex.ErrLost)
		assert.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld) // stops the watch
	})

	t.Run("validity ends", func(t *testing.T) {
		m := b.set(t).NewMutex("done:expires", mutex.WithTTL(300*time.Millisecond))
		require.NoError(t, m.LockContext(t.Context()))
		requireClosed(t, m.Done(), "Done watches the validity, as Lost does")
		assert.True(t, closedNow(m.Lost()))
	})

	t.Run("close", func(t *testing.T) {
		rs := b.set(t)
		m := rs.NewMutex("done:close", mutex.WithTTL(time.Minute))
		require.NoError(t, m.LockContext(t.Context()))
		done := m.Done()
		require.NoError(t, rs.Close())
		assert.True(t, closedNow(done))
		assert.ErrorIs(t, m.LostCause(), mutex.ErrClosed)
	})

	t.Run("permit and read lock", func(t *testing.T) {
		rs := b.set(t)
		p, err := rs.NewSemaphore("done:sem", 2, mutex.WithTTL(time.Minute)).AcquireContext(t.Context())
		require.NoError(t, err)
		done, lost := p.Done(), p.Lost()
		require.NoError(t, p.ReleaseContext(t.Context()))
		assert.True(t, closedNow(done))
		assert.False(t, closedNow(lost))

		rw := rs.NewRWMutex("done:rw", mutex.WithTTL(time.Minute))
		require.NoError(t, rw.RLockContext(t.Context()))
		done = rw.Done()
		assert.False(t, closedNow(done))
		require.NoError(t, rw.RUnlockContext(t.Context()))
		assert.True(t, closedNow(done))
	})
}

// cutShort takes a hold with take and releases it with release given a
// cancelled ctx until that call returns ctx's error (on healthy nodes it
// nearly always does: it does not wait for the round trip).
func cutShort(t *testing.T, take func() error, release func(context.Context) error) {
	t.Helper()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for range 10 {
		require.NoError(t, take())
		if err := release(cancelled); err != nil {
			require.ErrorIs(t, err, context.Canceled)
			return
		}
	}
	t.Fatal("every release was confirmed before it looked at ctx")
}

// An UnlockContext (or Resign) that ctx cut short releases in the
// background; Done closes at once, and once a majority confirms that
// release, the hold ends as after a confirmed unlock: Lost stays open, Until
// is zero, a retry gets nil and the Mutex may lock again. It used to stay held, Done open
// and Campaign refused (ErrAlreadyHeld), until the loss deadline, while
// another owner already held the lock.
func TestAReleaseCutShortEndsTheHoldOnceConfirmed(t *testing.T) {
	const ttl = 10 * time.Second // loss deadline 9s away, past requireClosed's 5s
	b := realBackend(t, 3)
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoextend %v", auto), func(t *testing.T) {
			rs := b.set(t)
			name := fmt.Sprintf("cut:%v", auto)
			opts := []mutex.Option{mutex.WithTTL(ttl)}
			if auto {
				opts = append(opts, mutex.WithAutoExtend())
			}
			m := rs.NewMutex(name, opts...)
			cutShort(t, func() error { return m.LockContext(t.Context()) }, m.UnlockContext)
			lost := m.Lost()
			assert.True(t, closedNow(m.Done()), "the release was sent: the holder's work ends")
			assert.Eventually(t, func() bool { return m.Until().IsZero() }, 5*time.Second, time.Millisecond,
				"the acquisition was kept after the release was confirmed") // no signal marks the confirmation
			assert.False(t, closedNow(lost), "a release does not close Lost")
			assert.NoError(t, m.LostCause())
			m.Settle() // the third node's release may still be on its way
			assert.Zero(t, b.present(t, name))
			require.NoError(t, m.UnlockContext(t.Context()), "a retry learns that the release was confirmed")
			require.ErrorIs(t, m.UnlockContext(t.Context()), mutex.ErrNotHeld, "then nothing is held")
			require.NoError(t, m.LockContext(t.Context()), "the Mutex may lock again")
			require.NoError(t, m.UnlockContext(t.Context()))
		})
	}

	t.Run("election", func(t *testing.T) {
		rs := b.set(t)
		e := rs.NewElection("cut:elect", mutex.WithTTL(ttl))
		cutShort(t, func() error { return e.Campaign(t.Context(), "A") }, e.Resign)
		requireClosed(t, e.Done(), "Done stayed open after the resignation was confirmed")
		assert.True(t, e.Until().IsZero())
		other := rs.NewElection("cut:elect", mutex.WithTTL(ttl))
		require.NoError(t, other.Campaign(t.Context(), "B"))
		require.NoError(t, other.Resign(t.Context()))
		require.NoError(t, e.Campaign(t.Context(), "A"), "not ErrAlreadyHeld: it leads no more")
		require.NoError(t, e.Resign(t.Context()))
	})

	// Not confirmed (2 of 3 nodes paused): the Mutex keeps the acquisition
	// until a retry confirms the release, or its validity ends; Done closes
	// at once, since the release may land whenever the nodes answer.
	t.Run("unconfirmed", func(t *testing.T) {
		rs := b.set(t, redlock.WithNodeTimeout(100*time.Millisecond))
		m := rs.NewMutex("cut:down", mutex.WithTTL(ttl))
		cutShort(t, func() error {
			if err := m.LockContext(t.Context()); err != nil {
				return err
			}
			for _, s := range b.real[1:] {
				s.Pause()
				t.Cleanup(s.Resume)
			}
			return nil
		}, m.UnlockContext)
		assert.True(t, closedNow(m.Done()), "the holder's work must stop: the release goes on")
		assert.False(t, m.Until().IsZero(), "the acquisition is kept, for a retry")
		for _, s := range b.real[1:] {
			s.Resume()
		}
		require.NoError(t, m.UnlockContext(t.Context()), "a retry confirms the release")
		assert.True(t, closedNow(m.Done()))
	})
}

// A Resign that too few nodes answer still ends the leadership for its
// candidate: the release it sent lands as soon as the nodes answer, and
// another candidate may lead at once, so leader work waiting on Done stops
// now. It used to go on for the rest of the validity (Done open, Until and
// FencingToken set) while the other candidate led. A second Resign confirms.
func TestAnUnconfirmedResignEndsTheLeadership(t *testing.T) {
	b := realBackend(t, 3)
	a := b.set(t, redlock.WithNodeTimeout(100*time.Millisecond)).NewElection("resign:down", mutex.WithTTL(10*time.Second))
	require.NoError(t, a.Campaign(t.Context(), "A"))
	done := a.Done()
	for _, s := range b.real[1:] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	err := a.Resign(t.Context())
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.True(t, closedNow(done), "Done closed when Resign returned")
	assert.Contains(t, err.Error(), "resign from election", "the error names the resignation, not an unlock")
	assert.True(t, a.Until().IsZero())
	assert.Zero(t, a.FencingToken())
	for _, s := range b.real[1:] {
		s.Resume()
	}
	other := b.set(t).NewElection("resign:down", mutex.WithTTL(10*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, other.Campaign(ctx, "B"), "the release sent by the first Resign landed")
	require.NoError(t, a.Resign(t.Context()), "a second Resign confirms what the first sent")
	require.NoError(t, other.Resign(t.Context()))
}
