package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scripted is a redis.Scripter whose every script call returns reply.
type scripted struct {
	reply any
	err   error
}

func (s scripted) cmd() *redis.Cmd                                                { return redis.NewCmdResult(s.reply, s.err) }
func (s scripted) Eval(context.Context, string, []string, ...any) *redis.Cmd      { return s.cmd() }
func (s scripted) EvalSha(context.Context, string, []string, ...any) *redis.Cmd   { return s.cmd() }
func (s scripted) EvalRO(context.Context, string, []string, ...any) *redis.Cmd    { return s.cmd() }
func (s scripted) EvalShaRO(context.Context, string, []string, ...any) *redis.Cmd { return s.cmd() }
func (s scripted) ScriptExists(context.Context, ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceResult(nil, nil)
}
func (s scripted) ScriptLoad(context.Context, string) *redis.StringCmd {
	return redis.NewStringResult("", nil)
}

// Replies of any other shape than the scripts produce must be errors, never
// votes: a nil, a string "1", a float, a 2, or a bare integer where an array
// is expected.
func TestMalformedRepliesAreErrors(t *testing.T) {
	ctx := t.Context()
	for _, reply := range []any{nil, "1", "OK", 1.0, int64(2), int64(-1), []any{int64(1)}, true} {
		_, err := node.New(scripted{reply: reply}, "fake:1").Extend(ctx, node.NewCalls("k", time.Second, "").Extend("t"))
		assert.ErrorContains(t, err, "unexpected reply", "extend %#v", reply)
	}
	for _, reply := range []any{nil, "1", "OK", 1.0, int64(2), int64(-2), []any{int64(1)}, true} {
		_, err := node.New(scripted{reply: reply}, "fake:1").Release(ctx, node.NewCalls("k", time.Second, "").Release("t"))
		assert.ErrorContains(t, err, "unexpected reply", "release %#v", reply)
	}
	for _, reply := range []any{nil, int64(1), "1", []any{}, []any{int64(1)}, []any{"1", int64(0)}, []any{int64(2), int64(0)}, []any{int64(1), int64(0), int64(0)}} {
		_, _, err := node.New(scripted{reply: reply}, "fake:1").Acquire(ctx, node.NewCalls("k", time.Second, "").Acquire("t"))
		assert.ErrorContains(t, err, "unexpected reply", "acquire %#v", reply)
	}
	_, err := node.New(scripted{err: redis.Nil}, "fake:1").Release(ctx, node.NewCalls("k", time.Second, "").Release("t"))
	assert.ErrorIs(t, err, redis.Nil, "a nil reply is an error, not a No")
}

func TestErrorRepliesPassThrough(t *testing.T) {
	boom := errors.New("READONLY You can't write against a read only replica.")
	_, _, err := node.New(scripted{err: boom}, "fake:1").Acquire(t.Context(), node.NewCalls("k", time.Second, "").Acquire("t"))
	assert.ErrorIs(t, err, boom)
}

func TestTokensAreUniqueAndLongEnough(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		tok := node.NewToken()
		require.Len(t, tok, 26)
		require.False(t, seen[tok])
		seen[tok] = true
	}
}

// TestScripts checks each script's semantics on miniredis and on a real
// redis-server.
func TestScripts(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		s := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		testScripts(t, c)
	})
	t.Run("redis-server", func(t *testing.T) {
		testScripts(t, redistest.StartOne(t).Client(t))
	})
}

func testScripts(t *testing.T, c *redis.Client) {
	ctx := t.Context()
	n := node.New(c, "n")

	ok, _, err := n.Acquire(ctx, node.NewCalls("lock", 10*time.Second, "").Acquire("mine"))
	require.NoError(t, err)
	assert.True(t, ok, "SET NX on a free key")
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val())

	require.NoError(t, c.PExpire(ctx, "lock", time.Second).Err())
	ok, _, err = n.Acquire(ctx, node.NewCalls("lock", 10*time.Second, "").Acquire("mine"))
	require.NoError(t, err)
	assert.True(t, ok, "our own token counts as taken")
	assert.Greater(t, c.PTTL(ctx, "lock").Val(), 9*time.Second, "and its TTL is reset")

	ok, holderTTL, err := n.Acquire(ctx, node.NewCalls("lock", 10*time.Second, "").Acquire("theirs"))
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Greater(t, holderTTL, 9*time.Second, "the holder's remaining TTL comes back")
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val())

	ok, err = n.Extend(ctx, node.NewCalls("lock", time.Minute, "").Extend("theirs"))
	require.NoError(t, err)
	assert.False(t, ok, "extend is token-checked")
	rel, err := n.Release(ctx, node.NewCalls("lock", time.Second, "").Release("theirs"))
	require.NoError(t, err)
	assert.Equal(t, node.Taken, rel, "release is token-checked")
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val())

	ok, err = n.Extend(ctx, node.NewCalls("lock", time.Minute, "").Extend("mine"))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Greater(t, c.PTTL(ctx, "lock").Val(), 59*time.Second, "extend sets the TTL")

	rel, err = n.Release(ctx, node.NewCalls("lock", time.Second, "").Release("mine"))
	require.NoError(t, err)
	assert.Equal(t, node.Released, rel)
	assert.Zero(t, c.Exists(ctx, "lock").Val())
	rel, err = n.Release(ctx, node.NewCalls("lock", time.Second, "").Release("mine"))
	require.NoError(t, err)
	assert.Equal(t, node.Missing, rel, "a second release finds nothing")

	ok, err = n.Extend(ctx, node.NewCalls("lock", time.Minute, "").Extend("mine"))
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Zero(t, c.Exists(ctx, "lock").Val(), "extend never recreates a key")

	require.NoError(t, c.Set(ctx, "forever", "theirs", 0).Err())
	ok, holderTTL, err = n.Acquire(ctx, node.NewCalls("forever", time.Second, "").Acquire("mine"))
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, -time.Millisecond, holderTTL, "a key without TTL reports -1")

	require.NoError(t, c.HSet(ctx, "hash", "f", "v").Err())
	_, _, err = n.Acquire(ctx, node.NewCalls("hash", time.Second, "").Acquire("mine"))
	assert.ErrorContains(t, err, "WRONGTYPE")
	_, err = n.Extend(ctx, node.NewCalls("hash", time.Second, "").Extend("mine"))
	assert.ErrorContains(t, err, "WRONGTYPE")
	_, err = n.Release(ctx, node.NewCalls("hash", time.Second, "").Release("mine"))
	assert.ErrorContains(t, err, "WRONGTYPE")
}
