package mutex_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A lease survives nodes that lose their data one at a time, its renewals
// putting its key back; they put back the record beside the key too (a
// Mutex's metadata, the latest set; a semaphore's limit), so a majority
// shows it after a majority of nodes lost it.

// rollingFlush empties nodes 0, 1 and 2 of b, one at a time, each once the
// renewals on fake (those of probe's set) put key back on the one before.
func rollingFlush(t *testing.T, b *backend, fake *clock.Fake, probe *mutex.Mutex, key, token string) {
	t.Helper()
	asleep(t, probe)
	require.NotEmpty(t, token)
	for i := range 3 {
		flushAll(t, b, i)
		// The first renewal finds the key gone, the next puts it back.
		for n := 0; b.get(t, i, key) != token; n++ {
			require.Less(t, n, 3, "node %d: the key was never put back", i)
			fake.Advance(leaseTTL / 3)
			asleep(t, probe)
			probe.Settle()
		}
	}
}

// requireRecords checks that every node shows metadata beside token in
// name's key, as Inspect reads them.
func requireRecords(t *testing.T, rs *redlock.Redlock, name, token, metadata string) {
	t.Helper()
	in, err := rs.Inspect(t.Context(), name)
	require.NoError(t, err)
	require.Len(t, in.Locks, 1)
	assert.Equal(t, token, in.Locks[0].Holder)
	assert.Equal(t, metadata, in.Locks[0].Metadata)
	for i, v := range in.Locks[0].Values {
		assert.Equal(t, token, v.Token, "node %d", i)
		assert.Equal(t, metadata, v.Metadata, "node %d", i)
	}
}

// A Mutex's metadata, changed after the acquisition, is put back with its
// key by the renewals: the latest, not the acquisition's.
func TestMetadataSurvivesARollingFlush(t *testing.T) {
	b := realBackend(t, 5)
	rs, fake := leaseSet(t, b)
	m := rs.NewMutex("md:rolling", mutex.WithTTL(leaseTTL), mutex.WithAutoExtend(), mutex.WithMetadata("v1"))
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.SetMetadata(t.Context(), "v2"))
	rollingFlush(t, b, fake, m, "md:rolling", m.Value())
	require.False(t, closed(m.Lost()), "still held: %v", m.LostCause())
	requireRecords(t, rs, "md:rolling", m.Value(), "v2")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A leader whose key a majority lost, one node at a time, still leads on
// Leader, with its latest proclamation on every node.
func TestLeaderSurvivesARollingFlush(t *testing.T) {
	b := realBackend(t, 5)
	rs, fake := leaseSet(t, b)
	e := rs.NewElection("sched", mutex.WithTTL(leaseTTL))
	require.NoError(t, e.Campaign(t.Context(), "v1"))
	require.NoError(t, e.Proclaim(t.Context(), "v2"))
	want, err := e.Leader(t.Context())
	require.NoError(t, err)
	require.Equal(t, "v2", want.Value)
	token := b.get(t, 0, "sched")
	rollingFlush(t, b, fake, rs.NewMutex("probe"), "sched", token)

	got, err := e.Leader(t.Context())
	require.NoError(t, err)
	assert.Equal(t, want, got)
	requireRecords(t, rs, "sched", token, strconv.FormatUint(want.FencingToken, 10)+" 2 v2")
	require.NoError(t, e.Resign(t.Context()))
}

// A semaphore's limit is put back with its permit: another limit is still
// refused.
func TestSemaphoreLimitSurvivesARollingFlush(t *testing.T) {
	b := realBackend(t, 5)
	rs, fake := leaseSet(t, b)
	sem := rs.NewSemaphore("jobs", 1, mutex.WithTTL(leaseTTL), mutex.WithAutoExtend())
	p, err := sem.AcquireContext(t.Context())
	require.NoError(t, err)
	sem.Settle() // it returns at a majority: node 3's key, read below, may still be on its way
	rollingFlush(t, b, fake, rs.NewMutex("probe"), "jobs:quorumlock:permit:0", b.get(t, 3, "jobs:quorumlock:permit:0"))
	for i := range b.admin {
		assert.Equal(t, "1", b.get(t, i, "jobs:quorumlock:limit"), "node %d keeps the limit", i)
	}
	_, err = rs.NewSemaphore("jobs", 2).TryAcquireContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrInvalid)
	require.NoError(t, p.ReleaseContext(t.Context()))
}
