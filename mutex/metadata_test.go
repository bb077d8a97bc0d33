package mutex_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// mdSuffix ends the name of a lock key's metadata record.
const mdSuffix = ":quorumlock:md"

func mdSet(t *testing.T, servers []*redistest.Server) *redlock.Redlock {
	t.Helper()
	rs, err := redlock.New(redistest.Clients(t, servers), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	return rs
}

// TestMetadataLivesAndDiesWithTheLock: WithMetadata's record is written with
// the key, shown by Inspect on a majority, extended with the key, and gone
// on every node after the release.
func TestMetadataLivesAndDiesWithTheLock(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := mdSet(t, servers), mdSet(t, servers)
	ctx := t.Context()

	m := holders.NewMutex("md:life", mutex.WithTTL(10*time.Second), mutex.WithMetadata("host=a pid=42"))
	require.NoError(t, m.LockContext(ctx))
	m.Settle() // the acquisition has reached every node, not just a majority
	in, err := admin.Inspect(ctx, "md:life")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1)
	ls := in.Locks[0]
	assert.Equal(t, m.Value(), ls.Holder)
	assert.Equal(t, "host=a pid=42", ls.Metadata)
	for i, v := range ls.Values {
		assert.Equal(t, "host=a pid=42", v.Metadata, "node %d", i)
	}
	assert.Contains(t, in.String(), `metadata "host=a pid=42"`)

	// Age both keys, then extend: the record's TTL comes back with the key's.
	for _, s := range servers {
		s.Do(t, "PEXPIRE", "md:life", 3000)
		s.Do(t, "PEXPIRE", "md:life"+mdSuffix, 3000)
	}
	require.NoError(t, m.ExtendContext(ctx))
	m.Settle()
	for i, s := range servers {
		assert.Greater(t, s.Do(t, "PTTL", "md:life"+mdSuffix).(int64), int64(9000), "node %d: the record was extended", i)
	}

	require.NoError(t, m.UnlockContext(ctx))
	m.Settle()
	for i, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "md:life", "md:life"+mdSuffix).(int64), "node %d: key and record gone", i)
	}
	in, err = admin.Inspect(ctx, "md:life")
	require.NoError(t, err)
	assert.Empty(t, in.Locks)
}

// TestMetadataOnlyWhereTheKeyWasTaken: a node that refuses the lock gets no
// record, and a failed acquisition's rollback takes the records it wrote;
// the record expires no later than its key.
func TestMetadataOnlyWhereTheKeyWasTaken(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := mdSet(t, servers), mdSet(t, servers)
	ctx := t.Context()

	for _, s := range servers[1:] {
		s.Do(t, "SET", "md:taken", "someone-else", "PX", 60000)
	}
	m := holders.NewMutex("md:taken", mutex.WithMetadata("mine"), mutex.WithTries(1))
	require.ErrorIs(t, m.TryLockContext(ctx), mutex.ErrNotObtained)
	m.Settle()
	for i, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "md:taken"+mdSuffix).(int64), "node %d: no record", i)
	}
	in, err := admin.Inspect(ctx, "md:taken")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1)
	assert.Equal(t, "someone-else", in.Locks[0].Holder)
	assert.Empty(t, in.Locks[0].Metadata)

	short := holders.NewMutex("md:short", mutex.WithTTL(time.Second), mutex.WithMetadata("short"))
	require.NoError(t, short.LockContext(ctx))
	short.Settle() // it returns at a majority: the last node's script may still be on its way
	for i, s := range servers {
		key, record := s.Do(t, "PTTL", "md:short").(int64), s.Do(t, "PTTL", "md:short"+mdSuffix).(int64)
		assert.Positive(t, record, "node %d", i)
		// Written by the same script call: on Redis 7.0 the server's clock
		// may tick between its two SETs, so the record may end 1ms later.
		assert.LessOrEqual(t, record, key+1, "node %d: the record expires with the key", i)
	}
	require.NoError(t, short.UnlockContext(ctx))
}

// TestSetMetadataIsTokenChecked: a held lock's metadata is replaced on a
// majority, keeping the key's TTL; a Mutex that does not hold, or whose
// token a majority lost, changes nothing.
func TestSetMetadataIsTokenChecked(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := mdSet(t, servers), mdSet(t, servers)
	ctx := t.Context()

	m := holders.NewMutex("md:set", mutex.WithTTL(10*time.Second), mutex.WithMetadata("v1"))
	require.ErrorIs(t, m.SetMetadata(ctx, "v0"), mutex.ErrNotHeld, "not held yet")
	require.NoError(t, m.LockContext(ctx))
	m.Settle()
	for _, s := range servers {
		s.Do(t, "PEXPIRE", "md:set", 5000)
	}
	require.NoError(t, m.SetMetadata(ctx, "v2"))
	m.Settle()
	in, err := admin.Inspect(ctx, "md:set")
	require.NoError(t, err)
	require.Len(t, in.Locks, 1)
	assert.Equal(t, "v2", in.Locks[0].Metadata)
	for i, s := range servers {
		assert.LessOrEqual(t, s.Do(t, "PTTL", "md:set"+mdSuffix).(int64), int64(5000), "node %d: the key's TTL, not a new one", i)
	}
	require.ErrorIs(t, m.SetMetadata(ctx, string([]byte{0xff})), mutex.ErrInvalid)
	require.ErrorIs(t, holders.NewMutex("md:set").SetMetadata(ctx, "x"), mutex.ErrInvalid, "no WithMetadata")

	// Another owner on two nodes: the token is gone from a majority.
	for _, s := range servers[1:] {
		s.Do(t, "SET", "md:set", "other", "PX", 60000)
		s.Do(t, "SET", "md:set"+mdSuffix, "other\nnot yours", "PX", 60000)
	}
	require.ErrorIs(t, m.SetMetadata(ctx, "v3"), mutex.ErrNotHeld)
	for i, s := range servers[1:] {
		assert.Equal(t, "other\nnot yours", s.Do(t, "GET", "md:set"+mdSuffix), "node %d untouched", i+1)
	}
}
