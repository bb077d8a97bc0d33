package node_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// permitrenew.lua puts a key's record back only with the key, and never
// over a record it finds (another token's is left as it is).
func TestPermitRenewRestoresTheRecordWithTheKey(t *testing.T) {
	s := redistest.StartOne(t)
	c, n := s.Client(t), node.New(s.Client(t), "n", clock.Real())
	keys := []string{"k", "k:md"}
	renew := func(restore, record string) node.Renewal {
		t.Helper()
		r := call(t, n, node.PermitRenewScript, keys, "mine", 60000, restore, record)
		require.NoError(t, r.Err)
		codes, errs, err := node.ParseRenew(r.Reply, 1)
		require.NoError(t, err)
		require.Nil(t, errs)
		return codes[0]
	}
	assert.Equal(t, node.Gone, renew("0", ""))
	assert.Equal(t, node.Restored, renew("1", "mine\nv1"))
	assert.Equal(t, "mine\nv1", c.Get(t.Context(), "k:md").Val())
	assert.Greater(t, c.PTTL(t.Context(), "k:md").Val().Milliseconds(), int64(59000), "with the key's TTL")

	require.NoError(t, c.Del(t.Context(), "k:md").Err())
	assert.Equal(t, node.Extended, renew("0", ""))
	assert.Zero(t, c.Exists(t.Context(), "k:md").Val(), "a key extended gets no record")

	require.NoError(t, c.Del(t.Context(), "k").Err())
	require.NoError(t, c.Set(t.Context(), "k:md", "theirs\nv0", 0).Err())
	assert.Equal(t, node.Restored, renew("1", "mine\nv1"))
	assert.Equal(t, "theirs\nv0", c.Get(t.Context(), "k:md").Val(), "a record found is kept")
}
