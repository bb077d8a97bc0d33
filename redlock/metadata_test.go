package redlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
)

// The metadata record of a lock key, as the library names it beside the key.
const mdSuffix = ":quorumlock:md"

// TestMetadataLivesAndDiesWithTheLock: WithMetadata's record is written with
// the key, shown by Inspect on a majority, extended with the key, and gone
// on every node after the release.
func TestMetadataLivesAndDiesWithTheLock(t *testing.T) {
	servers := redistest.Start(t, 3)
	holders, admin := doSet(t, servers), doSet(t, servers)
	ctx := t.Context()

	m := holders.NewMutex("md:life", mutex.WithTTL(10*time.Second), mutex.WithMetadata("host=a pid=42"))
	require.NoError(t, m.LockContext(ctx))
	in, err := admin.Inspect(ctx, "md:life")
	require.NoError(t, err)
	ls := lockOf(t, in, "md:life")
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
	for i, s := range servers {
		assert.Greater(t, s.Do(t, "PTTL", "md:life"+mdSuffix).(int64), int64(9000), "node %d: the record was extended", i)
	}

	require.NoError(t, m.UnlockContext(ctx))
	for i, s := range servers {
		assert.Equal(t, int64(0), s.Do(t, "EXISTS", "md:life", "md:life"+mdSuffix).(int64), "node %d: key and record gone", i)
	}
	in, err = admin.Inspect(ctx, "md:life")
	require.NoError(t, err)
	assert.Empty(t, in.Locks)
}
