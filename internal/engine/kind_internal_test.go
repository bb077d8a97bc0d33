package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// otherRelease keeps release.lua's contract in its simplest form (no queue,
// no notification) and leaves a mark, so a test can tell whose release ran.
const otherRelease = `
redis.call('SET', KEYS[1] .. ':released-by-other', ARGV[1])
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {1, ''}
elseif holder == false then
  return {0, ''}
end
return {-1, ''}`

// A primitive is a Kind (its scripts) plus a thin type: the engine runs a
// lock of another kind beside a Mutex's on one set, through that kind's own
// scripts, and keeps the leases of both kinds renewed.
func TestAKindRunsItsOwnScripts(t *testing.T) {
	redistest.Require(t)
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	nodes := make([]*node.Node, len(clients))
	for i, c := range clients {
		nodes[i] = node.New(c, servers[i].Addr(), clock.Real())
	}
	e := errors.New
	s := &Set{Nodes: nodes, Clock: clock.Real(), DriftFactor: 0.01, Errors: Errors{
		NotObtained: e("not obtained"), NodesUnavailable: e("unavailable"), NotHeld: e("not held"),
		Lost: e("lost"), NodeTimeout: e("timeout"),
		Quarantined: e("quarantined"), Closed: e("closed"),
		Node: func(addr string, err error) error { return err },
	}}
	defer s.Close()
	other := &Kind{Name: "other", Acquire: node.AcquireScript, Release: node.NewScript("other-release", otherRelease),
		Renew: node.RenewScript.Unique("other")}
	const ttl = 300 * time.Millisecond
	spec := func(name string, k *Kind) Spec {
		return Spec{Kind: k, Name: name, TTL: ttl, RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond, AutoExtend: true}
	}
	mine, theirs := NewContender(s, spec("kind-mutex", nil)), NewContender(s, spec("kind-other", other))
	for _, l := range []*Contender{mine, theirs} {
		require.NoError(t, l.Acquire(t.Context(), 1, nil), "%s", l.spec.Name)
	}
	// Held through several TTLs: the renewals of both kinds are answered.
	held := time.NewTimer(4 * ttl)
	defer held.Stop()
	select {
	case <-mine.Current().Lost():
		t.Fatalf("the mutex's lease was lost: %v", mine.Current().LostCause())
	case <-theirs.Current().Lost():
		t.Fatalf("the other kind's lease was lost: %v", theirs.Current().LostCause())
	case <-held.C:
	}
	for _, l := range []*Contender{mine, theirs} {
		require.NoError(t, l.Release(t.Context(), l.Current()), "%s", l.spec.Name)
	}
	s.Settle() // Release returns at a majority; the other nodes' deletes complete here
	for i, c := range clients {
		assert.Zero(t, c.Exists(t.Context(), "kind-mutex", "kind-other").Val(), "node %d: keys left behind", i)
		assert.Equal(t, theirs.Latest().Token(), c.Get(t.Context(), "kind-other:released-by-other").Val(), "node %d: the other kind's release ran", i)
		assert.Zero(t, c.Exists(t.Context(), "kind-mutex:released-by-other").Val(), "node %d: the mutex's release is its own", i)
	}
}
