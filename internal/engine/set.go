package engine

import (
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/slot"
	"github.com/quorumlock/quorumlock/quorum"
)

// Set is a node set as the engine sees it: the nodes, the set-wide settings,
// and the coordination shared by every lock of the set in this process. It
// is built once by package redlock and is safe for concurrent use.
type Set struct {
	Nodes       []*node.Node
	KeyPrefix   string
	DriftFactor float64       // in [0, 0.5); see timing.Validity
	NodeTimeout time.Duration // bound on each node's answer; 0 derives it
	Clock       clock.Clock
	Quarantine  time.Duration // restart quarantine; 0: off
	Notify      bool          // releases publish, waiters subscribe
	Handoff     bool          // Release may pass a Mutex to a caller of the set (pass.go)
	Errors      Errors
	Observer    Observer // told what the locks and nodes do; nil: nobody, at no cost

	unique uniqueScripts // the set's own acquire scripts, with the quarantine on

	hubOnce sync.Once
	hub     *notify.Hub

	cohort cohort // the passable locks' heirs and acquisitions

	gatesMu sync.Mutex
	gates   map[string]*Gate // keys with an acquire attempt in progress or waiting

	renewerOnce sync.Once
	renewer     *renewer

	checks sync.WaitGroup // restart-quarantine INFO reads in flight

	close closer
}

// Errors are the values the engine's errors match, which package mutex
// defines: the engine builds errors from them without importing it.
type Errors struct {
	NotObtained, NodesUnavailable, NotHeld, AlreadyHeld, Invalid, Lost error
	NodeTimeout, Quarantined, Closed                                   error
	// Node wraps one node's failure as the *NodeError of package mutex.
	Node func(addr string, err error) error
}

// Keys the library keeps on every node besides the locks, without TTL: one
// marker per node (restart detection) and one fencing counter per node set.
// They are named after the set's key prefix; no lock may use these names.
const (
	markerName = "quorumlock:node"
	fenceName  = "quorumlock:fence"
)

// MarkerKey returns the key of the node marker for this set.
func (s *Set) MarkerKey() string { return s.KeyPrefix + markerName }

// FenceKey returns the key of the fencing counter for this set.
func (s *Set) FenceKey() string { return s.KeyPrefix + fenceName }

// Bounds of the per-node timeout the engine derives.
const (
	// minTimeout is the floor, lowered to a fifth of a short TTL (but not
	// below shortTTLTimeout), where it would eat the validity.
	minTimeout      = 200 * time.Millisecond
	shortTTLTimeout = 50 * time.Millisecond
	maxTimeout      = 500 * time.Millisecond
	// latencyFactor is how many times a node's usual round trip the derived
	// timeout allows at least.
	latencyFactor = 8
)

// Timeout returns how long a round waits for a node's answer, counted from
// the moment its command left, under a lock of the given TTL: NodeTimeout
// when set; otherwise the larger of ttl/100 and 8 times the slowest node's
// usual round trip, kept within [200ms, 500ms]; for a TTL under 1s the
// floor is a fifth of the TTL, at least 50ms.
func (s *Set) Timeout(ttl time.Duration) time.Duration {
	if s.NodeTimeout > 0 {
		return s.NodeTimeout
	}
	d := ttl / 100
	for _, n := range s.Nodes {
		d = max(d, latencyFactor*n.Latency())
	}
	floor := min(minTimeout, max(ttl/5, shortTTLTimeout))
	return min(max(d, floor), maxTimeout)
}

// Hub returns the set's release notifications hub.
func (s *Set) Hub() *notify.Hub {
	s.hubOnce.Do(func() { s.hub = notify.NewHub(s.Nodes, s.Clock) })
	return s.hub
}

func (s *Set) renewals() *renewer {
	s.renewerOnce.Do(func() { s.renewer = newRenewer(s) })
	return s.renewer
}

// Need returns the votes a majority of the set needs: N/2+1.
func (s *Set) Need() int { return quorum.Majority(len(s.Nodes)) }

// Settle blocks until every command sent to the nodes so far has completed,
// the restart-quarantine checks (INFO) they started among them, and the
// renewals among them have been counted.
func (s *Set) Settle() {
	for _, n := range s.Nodes {
		n.Flush()
	}
	s.checks.Wait()
	s.renewals().settle()
}

// SettleRenewals blocks until no renewal's answers are still being read.
func (s *Set) SettleRenewals() { s.renewals().settle() }

// FenceKeyOf returns the fencing counter a lock on key draws from: the
// set's one counter when no node is a Redis Cluster; otherwise the counter
// of key's hash slot, in that slot (a script's keys must share one), so
// that every name of a slot, and a multi-name lock over them, shares it
// (docs/design.md, "Cluster nodes").
func (s *Set) FenceKeyOf(key string) string { return s.inSlotOf(s.FenceKey(), key) }

// MarkerKeyOf returns the node marker an acquisition of key reads: the
// node's one marker, or, as FenceKeyOf, its slot's on a Cluster node.
func (s *Set) MarkerKeyOf(key string) string { return s.inSlotOf(s.MarkerKey(), key) }

// inSlotOf names the record base kept for key's hash slot when some node is
// a Cluster: base + ":{<slot name>}", or "{<slot name>}" + base when the key
// prefix's own braces would hash the first elsewhere.
func (s *Set) inSlotOf(base, key string) string {
	if !s.clustered() {
		return base
	}
	n, want := slot.Named(slot.Of(key)), slot.Of(key)
	if k := base + ":{" + n + "}"; slot.Of(k) == want {
		return k
	}
	return "{" + n + "}" + base
}

// slotRecord reports whether key is a per-slot record of inSlotOf.
func (s *Set) slotRecord(key string) bool {
	for _, base := range []string{s.FenceKey(), s.MarkerKey()} {
		if strings.HasPrefix(key, base+":{") || strings.HasPrefix(key, "{") && strings.HasSuffix(key, "}"+base) {
			return true
		}
	}
	return false
}

// clustered reports whether some node is a Redis Cluster client.
func (s *Set) clustered() bool {
	for _, n := range s.Nodes {
		if _, ok := n.Client().(*redis.ClusterClient); ok {
			return true
		}
	}
	return false
}
