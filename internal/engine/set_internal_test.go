package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// The derived per-node timeout (before any round trip was measured): a
// 200ms floor, TTL/100 above it, 500ms at most, and a fifth of a TTL under
// 1s (at least 50ms), so that the floor does not eat a short lock's validity.
func TestDerivedNodeTimeout(t *testing.T) {
	s := &Set{Nodes: []*node.Node{node.New(nil, "a", clock.Real())}}
	for ttl, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 50 * time.Millisecond,
		500 * time.Millisecond: 100 * time.Millisecond,
		750 * time.Millisecond: 150 * time.Millisecond,
		time.Second:            200 * time.Millisecond,
		2 * time.Second:        200 * time.Millisecond,
		8 * time.Second:        200 * time.Millisecond,
		30 * time.Second:       300 * time.Millisecond,
		time.Hour:              500 * time.Millisecond,
	} {
		assert.Equal(t, want, s.Timeout(ttl), "TTL %v", ttl)
	}
	s.NodeTimeout = 7 * time.Millisecond
	assert.Equal(t, 7*time.Millisecond, s.Timeout(8*time.Second), "WithNodeTimeout wins")
}

// The waiter a release wakes in this process is the one the nodes that
// released name; a node whose queue was empty names no one and must not
// outvote one that names a waiter (that waiter slept until its fallback).
func TestHeadOfIgnoresNodesThatNameNoOne(t *testing.T) {
	for _, tc := range []struct {
		heads []string // one Yes reply per node, in order
		want  string
	}{
		{[]string{"", "w1"}, "w1"},
		{[]string{"w1", ""}, "w1"},
		{[]string{"", "", "w1"}, "w1"},
		{[]string{"w2", "w1", "w1"}, "w1"},
		{[]string{"", ""}, ""},
	} {
		r := round.New[released](len(tc.heads), clock.Real(), time.Second, nil)
		for i, h := range tc.heads {
			r.Answer(i, quorum.Yes, released{status: node.Released, head: h}, nil)
		}
		_ = r.Collect(context.Background(), nil) // reads every answer
		assert.Equal(t, tc.want, headOf(r), "%q", tc.heads)
	}
}
