package mutex_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
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
