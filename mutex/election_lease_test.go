package mutex_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
)

// A leader's Until and FencingToken are its leadership's: what Leader reports
// to others, and a validity no later than its lock key's; zero otherwise.
func TestElectionUntilAndFencingToken(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	e := rs.NewElection("h-elect", mutex.WithTTL(2*time.Second))
	assert.Zero(t, e.Until())
	assert.Zero(t, e.FencingToken())
	require.NoError(t, e.Campaign(t.Context(), "a"))
	won := time.Now() // the validity began before
	l, err := rs.NewElection("h-elect").Leader(t.Context())
	require.NoError(t, err)
	assert.Equal(t, l.FencingToken, e.FencingToken())
	assert.NotZero(t, e.FencingToken())
	assert.True(t, e.Until().After(time.Now()) && !e.Until().After(won.Add(2*time.Second)), "until %v", e.Until().Sub(won))
	require.NoError(t, e.Resign(t.Context()))
	assert.Zero(t, e.Until())
	assert.Zero(t, e.FencingToken())
	assert.NoError(t, e.LostCause(), "resigned, not lost")
}

// A leadership lost says why, as its Mutex would: here another owner's
// ForceUnlock, ErrNotHeld; nil before the first and while leading.
func TestElectionLostCause(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	e := rs.NewElection("h-elect-lost", mutex.WithTTL(2*time.Second))
	assert.NoError(t, e.LostCause())
	require.NoError(t, e.Campaign(t.Context(), "a"))
	assert.NoError(t, e.LostCause())
	_, err := b.set(t).ForceUnlock(t.Context(), "h-elect-lost")
	require.NoError(t, err)
	select {
	case <-e.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leadership forced open did not end")
	}
	require.ErrorIs(t, e.LostCause(), mutex.ErrLost)
	assert.ErrorIs(t, e.LostCause(), mutex.ErrNotHeld)
}
