package mutex_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

const fenceKey = "quorumlock:fence"

func TestFencingTokensIncreaseAcrossDifferentMajorities(t *testing.T) {
	b := realBackend(t, 5)
	rs := b.set(t, redlock.WithNodeTimeout(50*time.Millisecond))
	rng := rand.New(rand.NewPCG(1, 2))
	var last uint64
	for round := range 30 {
		// A different minority is unreachable each time, so different
		// majorities grant successive holders.
		paused := rng.Perm(5)[:rng.IntN(3)]
		for _, i := range paused {
			b.real[i].Pause()
		}
		m := rs.NewMutex("fenced", mutex.WithFencing())
		require.NoError(t, m.LockContext(t.Context()), "round %d", round)
		token := m.FencingToken()
		assert.Greater(t, token, last, "round %d: tokens strictly increase", round)
		last = token
		require.NoError(t, m.UnlockContext(t.Context()))
		assert.Zero(t, m.FencingToken(), "no token once released")
		for _, i := range paused {
			b.real[i].Resume()
		}
		m.Settle()
	}
}

// Empty restarts wipe the counter on the nodes that restart. A majority that
// still holds it keeps the argument; when a majority lost it, numbers fall
// back on the clock, still above every earlier one.
func TestFencingTokensSurviveEmptyRestarts(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	take := func() uint64 {
		t.Helper()
		m := rs.NewMutex("fenced", mutex.WithFencing())
		require.NoError(t, m.LockContext(t.Context()))
		token := m.FencingToken()
		require.NoError(t, m.UnlockContext(t.Context()))
		m.Settle()
		return token
	}
	t1 := take()
	b.real[0].RestartEmpty() // one counter lost: nodes 1 and 2 still vouch
	t2 := take()
	assert.Greater(t, t2, t1)
	assert.Equal(t, strconv.FormatUint(t2+passBlock, 10), b.get(t, 0, fenceKey), "the write-back seeded the restarted node")
	b.real[1].RestartEmpty()
	b.real[2].RestartEmpty() // a majority lost the counter
	t3 := take()
	assert.Greater(t, t3, t2, "the clock keeps numbers increasing")
	t4 := take()
	assert.Greater(t, t4, t3)
}

// With too few counters left and the clock behind the one that survived,
// no number can be trusted: the acquisition fails instead of issuing a
// smaller one.
func TestFencingRefusesWhenNeitherMajorityNorClockCanVouch(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		ahead := strconv.FormatUint(uint64(time.Now().Add(100*365*24*time.Hour).UnixMicro()), 10)
		require.NoError(t, b.admin[0].Set(t.Context(), fenceKey, ahead, 0).Err())
		m := b.set(t).NewMutex("fenced", mutex.WithFencing())
		err := m.TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		assert.ErrorContains(t, err, "fencing")
		var failed *mutex.NodeError
		assert.False(t, errors.As(err, &failed), "every node answered: no node failed")
		m.Settle()
		assert.Zero(t, b.present(t, "fenced"), "rolled back")

		// Once a majority holds the counter again, numbers continue above it.
		require.NoError(t, b.admin[1].Set(t.Context(), fenceKey, ahead, 0).Err())
		require.NoError(t, m.TryLockContext(t.Context()))
		limit, err := strconv.ParseUint(ahead, 10, 64)
		require.NoError(t, err)
		assert.Greater(t, m.FencingToken(), limit)
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}

func TestNoFencingTokenWithoutTheOption(t *testing.T) {
	onBoth(t, 3, func(t *testing.T, b *backend) {
		m := b.set(t).NewMutex("plain")
		require.NoError(t, m.LockContext(t.Context()))
		assert.Zero(t, m.FencingToken())
		require.NoError(t, m.UnlockContext(t.Context()))
		m.Settle()
		assert.Zero(t, b.present(t, fenceKey), "no counter is created without fencing")
	})
}

// A lock may not be named after a key the library keeps: the set's counter
// and marker, or a key kept beside another lock's key (its waiters' queue,
// their expiries, its tombstones). Locking "job:quorumlock:q" used to be
// accepted, and then every TryLock of "job" failed with WRONGTYPE reported
// as ErrNodesUnavailable. Nothing is sent.
func TestReservedNamesAreRejected(t *testing.T) {
	onBoth(t, 1, func(t *testing.T, b *backend) {
		names := []string{"quorumlock:fence", "quorumlock:node", "job:quorumlock:q", "job:quorumlock:qx",
			"job:quorumlock:rel", "job:quorumlock:rel:SOMETOKEN", "{job}:quorumlock:q"}
		for _, name := range names {
			for _, call := range []func(*mutex.Mutex) error{
				func(m *mutex.Mutex) error { return m.LockContext(t.Context()) },
				func(m *mutex.Mutex) error { return m.TryLockContext(t.Context()) },
			} {
				require.ErrorIs(t, call(b.set(t).NewMutex(name)), mutex.ErrInvalid, name)
			}
			assert.Zero(t, b.present(t, name), "%s: nothing is written", name)
		}
		rs := b.set(t, redlock.WithKeyPrefix("app:"))
		require.ErrorIs(t, rs.NewMutex("quorumlock:fence").LockContext(t.Context()), mutex.ErrInvalid)
		m := b.set(t).NewMutex("job:quorumlock:queue") // only the exact names are kept
		require.NoError(t, m.LockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
	})
}
