package node_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMalformedAdminRepliesAreErrors(t *testing.T) {
	tests := []struct {
		script  string
		parse   func(reply any) error
		replies []any
	}{
		{"peek", func(v any) error { _, err := node.ParsePeek(v); return err },
			[]any{nil, "x", []any{"string", int64(1), int64(1)}, []any{"string", "1", int64(1), ""},
				[]any{"string", int64(-3), int64(1), ""}, []any{"hash", int64(1), int64(1), []any{"w"}},
				[]any{"string", int64(1), int64(1), []any{"a", "b"}}, []any{"hash", int64(1), int64(1), []any{"w", int64(1)}}}},
		{"scan", func(v any) error { _, _, err := node.ParseScan(v); return err },
			[]any{nil, []any{}, []any{int64(0)}, []any{"x"}, []any{"0", int64(1)}}},
		{"advance", func(v any) error { _, err := node.ParseCounter(v); return err },
			[]any{nil, "1", int64(-1), []any{int64(1)}}},
		{"evict", func(v any) error { _, err := node.ParseEviction(v); return err },
			[]any{nil, "1", int64(2), int64(-2), []any{int64(1)}}},
	}
	for _, tt := range tests {
		for _, reply := range tt.replies {
			assert.ErrorContains(t, tt.parse(reply), "unexpected reply", "%s %#v", tt.script, reply)
		}
	}
}

func TestAdminScripts(t *testing.T) {
	s := redistest.StartOne(t)
	n := node.New(s.Client(t), s.Addr(), clock.Real())
	s.Do(t, "SET", "k", "tok", "PX", 60000)
	s.Do(t, "HSET", "h", "w", "tok", "r:x", "123")
	s.Do(t, "SET", "fence", "41")

	p, err := node.ParsePeek(call(t, n, node.PeekScript, []string{"k"}).Reply)
	require.NoError(t, err)
	assert.Equal(t, "string", p.Type)
	assert.Equal(t, "tok", p.Value)
	assert.Greater(t, p.TTL, 59*time.Second)
	assert.WithinDuration(t, time.Now(), p.Now, time.Minute, "the node's clock")
	p, err = node.ParsePeek(call(t, n, node.PeekScript, []string{"h"}).Reply)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"w": "tok", "r:x": "123"}, p.Fields)
	assert.Equal(t, -time.Millisecond, p.TTL, "no TTL")
	p, err = node.ParsePeek(call(t, n, node.PeekScript, []string{"missing"}).Reply)
	require.NoError(t, err)
	assert.Equal(t, node.Peek{Type: "none", TTL: -2 * time.Millisecond, Now: p.Now}, p)

	cursor, keys, err := node.ParseScan(call(t, n, node.ScanScript, nil, "0", "[kh]", 100).Reply)
	require.NoError(t, err)
	assert.Equal(t, "0", cursor)
	assert.ElementsMatch(t, []string{"k", "h"}, keys)

	for _, step := range []struct {
		arg  any
		want uint64
	}{{"0", 41}, {int64(40), 41}, {int64(50), 50}, {"0", 50}} {
		got, err := node.ParseCounter(call(t, n, node.AdvanceScript, []string{"fence"}, step.arg).Reply)
		require.NoError(t, err)
		assert.Equal(t, step.want, got, "advance %v never lowers the counter", step.arg)
	}
	got, err := node.ParseCounter(call(t, n, node.AdvanceScript, []string{"new-fence"}, int64(7)).Reply)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), got, "a missing counter is created")

	for _, step := range []struct {
		key, typ string
		want     node.Eviction
	}{{"k", "hash", node.OtherType}, {"k", "string", node.Evicted}, {"k", "string", node.Absent}, {"h", "hash", node.Evicted}} {
		e, err := node.ParseEviction(call(t, n, node.EvictScript, []string{step.key, "q", "qx"}, step.typ, "").Reply)
		require.NoError(t, err)
		assert.Equal(t, step.want, e, "evict %s as a %s", step.key, step.typ)
	}
	assert.Equal(t, int64(0), s.Do(t, "EXISTS", "k", "h"))
}
