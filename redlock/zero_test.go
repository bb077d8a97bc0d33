package redlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A Redlock not made by New or NewFromURLs (its zero value, or nil) never
// panics: its accessors report no nodes, its locks are ErrInvalid, and Close
// has nothing to close.
func TestAZeroRedlockDoesNotPanic(t *testing.T) {
	for what, rs := range map[string]*redlock.Redlock{"zero": {}, "nil": nil} {
		assert.Nil(t, rs.Nodes(), what)
		assert.Zero(t, rs.Quorum(), what)
		assert.Zero(t, rs.Waiting("a"), what)
		require.NoError(t, rs.Close(), what)
		require.NoError(t, rs.Close(), what)
	}
	var zero redlock.Redlock
	require.ErrorIs(t, zero.NewMutex("a").TryLockContext(t.Context()), mutex.ErrInvalid)
}
