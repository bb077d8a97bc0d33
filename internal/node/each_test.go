package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// spin keeps the server busy for ARGV[1] microseconds.
var spin = node.NewScript("spin", `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1])
return 1`)

// departed reports when its command leaves, and then its result.
type departed struct {
	left chan struct{}
	results
}

func (d departed) Sent(int, time.Time) { close(d.left) }

// sendAhead sends script to n and returns once it has left: what is sent
// next waits behind it. Its result comes on the returned channel.
func sendAhead(t *testing.T, n *node.Node, script *node.Script, keys []string, args ...any) results {
	d := departed{left: make(chan struct{}), results: make(results, 1)}
	n.Send(&node.Cmd{Script: script, Keys: keys, Args: args, To: d})
	select {
	case <-d.left:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not leave")
	}
	return d.results
}

// A Call's timeout counts from when its command left: a command queued
// behind a slow one (300ms) and slow itself (200ms) is answered, within
// 400ms of leaving but not of the call. Without ever leaving, it times out
// and is left to run: the node runs it once it can.
func TestCallWaitsFromItsDeparture(t *testing.T) {
	s := redistest.StartOne(t)
	n := node.New(s.Client(t), s.Addr(), clock.Real())
	ahead := sendAhead(t, n, spin, nil, 300_000)
	start := time.Now()
	r := n.Call(t.Context(), 400*time.Millisecond, spin, nil, []any{200_000})
	require.NoError(t, r.Err, "answered %v after the call", time.Since(start))
	assert.Greater(t, time.Since(start), 400*time.Millisecond, "the test's premise: longer than the timeout after the call")
	require.NoError(t, (<-ahead).Err)

	s.Pause()
	t.Cleanup(s.Resume)
	fake := clock.NewFake(time.Now())
	n = node.New(s.Client(t), s.Addr(), fake)
	ahead = sendAhead(t, n, node.PeekScript, []string{"k"})
	done := make(chan node.Result)
	go func() {
		done <- n.Call(t.Context(), time.Second, node.AdvanceScript, []string{"fence"}, []any{int64(5)})
	}()
	require.NoError(t, fake.BlockUntil(t.Context(), 1))
	fake.Advance(time.Second)
	assert.ErrorIs(t, (<-done).Err, node.ErrTimeout)
	s.Resume()
	<-ahead
	n.Flush()
	assert.Equal(t, "5", s.Do(t, "GET", "fence"), "the command timed out is left to run")
}

// When ctx ends before its command left, a Call withdraws it: the node
// never runs it. The node, which kept it waiting, is not excused; but a
// Call whose ctx had ended already sends nothing and says so (ErrNotSent):
// the node was not asked.
func TestCallWithdrawsAnUnsentCommandWhenCtxEnds(t *testing.T) {
	s := redistest.StartOne(t)
	n := node.New(s.Client(t), s.Addr(), clock.Real())
	s.Pause()
	t.Cleanup(s.Resume)
	ahead := sendAhead(t, n, node.PeekScript, []string{"k"})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	r := n.Call(ctx, time.Minute, node.AdvanceScript, []string{"fence"}, []any{int64(5)})
	require.ErrorIs(t, r.Err, context.DeadlineExceeded)
	require.NotErrorIs(t, r.Err, node.ErrNotSent)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	r = n.Read(ended, time.Millisecond, node.AdvanceScript, []string{"fence"}, []any{int64(6)})
	require.ErrorIs(t, r.Err, context.Canceled)
	require.ErrorIs(t, r.Err, node.ErrNotSent, "not the stalled node's timeout: nothing was asked")
	s.Resume()
	<-ahead
	n.Flush()
	assert.Zero(t, s.Do(t, "EXISTS", "fence"), "withdrawn before it left")
	r = n.Call(t.Context(), time.Minute, node.PeekScript, []string{"fence"}, nil)
	require.NoError(t, r.Err)
	p, err := node.Parse(r, node.ParsePeek)
	require.NoError(t, err)
	assert.Equal(t, "none", p.Type)
}
