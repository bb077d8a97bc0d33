package engine

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/slot"
	"github.com/quorumlock/quorumlock/internal/timing"
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

	unique      sync.Map // with the quarantine on: the set's own copy of each acquire script
	hubOnce     sync.Once
	hub         *notify.Hub
	cohort      cohort // the passable locks' heirs and acquisitions (pass.go)
	gatesMu     sync.Mutex
	gates       map[string]*Gate // keys with an acquire attempt in progress or waiting
	renewerOnce sync.Once
	renewer     *renewer
	checks      sync.WaitGroup // restart-quarantine INFO reads in flight
	close       closer
}

// Errors are the values the engine's errors match, which package mutex
// defines: the engine builds errors from them without importing it.
type Errors struct {
	NotObtained, NodesUnavailable, NotHeld, Lost, NodeTimeout, Quarantined, Closed error
	// Node wraps one node's failure as the *NodeError of package mutex.
	Node func(addr string, err error) error
}

// Timeout returns how long a round waits for a node's answer, from the
// moment its command left, under a lock of the given TTL: NodeTimeout when
// set, else derived as docs/design.md ("Per-node timeout") says.
func (s *Set) Timeout(ttl time.Duration) time.Duration {
	if s.NodeTimeout > 0 {
		return s.NodeTimeout
	}
	var buf [16]time.Duration
	rtts := buf[:0]
	for _, n := range s.Nodes {
		rtts = append(rtts, n.Latency())
	}
	return timing.NodeTimeout(ttl, rtts, s.Need())
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
// with the quarantine checks they started and the renewals they counted;
// SettleRenewals, until no renewal's answers are still being read.
func (s *Set) Settle() {
	for _, n := range s.Nodes {
		n.Flush()
	}
	s.checks.Wait()
	s.renewals().settle()
}
func (s *Set) SettleRenewals() { s.renewals().settle() }

// The names of what the library keeps on the nodes besides the lock keys;
// no lock may be named so (Reserved).
const (
	PermitInfix  = ":quorumlock:permit:" // joins a semaphore's name and a permit's number
	RWSuffix     = ":quorumlock:rw"      // follows a read-write lock's name in its key's
	LimitSuffix  = ":quorumlock:limit"   // follows a semaphore's key in its limit record's
	RecordSuffix = ":quorumlock:idem"    // follows an idempotency key's lock key in its record's
	// Kept beside each lock key: its waiters' queue, their expiries, the
	// prefix of its release tombstones (one key per token); a Meta lock's
	// metadata record.
	auxInfix                                          = ":quorumlock:"
	auxQueue, auxExpiries, auxTombstones, auxMetadata = "q", "qx", "rel", "md"
	slotAuxInfix                                      = ":quorumlock:of:" // see beside
	// One per node, without TTL: the restart marker, the fencing counter.
	markerName, fenceName = "quorumlock:node", "quorumlock:fence"
)

// Reserved reports whether key is one the library keeps for itself, which
// no lock may have: its key and the other would collide.
func (s *Set) Reserved(key string) bool {
	for _, base := range []string{s.KeyPrefix + markerName, s.KeyPrefix + fenceName} {
		if key == base || strings.HasPrefix(key, base+":{") || strings.HasPrefix(key, "{") && strings.HasSuffix(key, "}"+base) {
			return true
		}
	}
	for _, suffix := range []string{auxQueue, auxExpiries, auxTombstones, auxMetadata, "rw", "limit", "idem"} {
		if strings.HasSuffix(key, auxInfix+suffix) {
			return true
		}
	}
	return strings.Contains(key, PermitInfix) || strings.Contains(key, slotAuxInfix) || strings.Contains(key, auxInfix+auxTombstones+":")
}

// Beside names the key ending in suffix (a ":quorumlock:" name above) kept
// beside key: key+suffix, or on sharded nodes a key in key's hash slot
// (docs/design.md, "Cluster nodes").
func (s *Set) Beside(key, suffix string) string {
	switch {
	case !s.Sharded() || slot.Tag(key) != "":
		return key + suffix
	case !strings.Contains(key, "}"):
		return "{" + key + "}" + suffix
	}
	return "{" + slot.Named(slot.Of(key)) + "}" + slotAuxInfix + key + suffix
}

// QueueKeys are the keys kept beside a lock key for its waiters' queue and
// their expiries.
func (s *Set) QueueKeys(key string) (queue, expiries string) {
	return s.Beside(key, auxInfix+auxQueue), s.Beside(key, auxInfix+auxExpiries)
}

// PermitKey names permit i of the semaphore whose key is key.
func (s *Set) PermitKey(key string, i int) string { return s.Beside(key, PermitInfix+strconv.Itoa(i)) }

// FenceKeyOf returns the fencing counter a lock on key draws from: the
// set's one, or on Cluster nodes the one of key's hash slot.
func (s *Set) FenceKeyOf(key string) string { return s.inSlotOf(s.KeyPrefix+fenceName, key) }

// MarkerKeyOf returns the node marker an acquisition of key reads, as FenceKeyOf.
func (s *Set) MarkerKeyOf(key string) string { return s.inSlotOf(s.KeyPrefix+markerName, key) }

// inSlotOf names the set's record base, or on Cluster nodes its copy for
// key's hash slot (docs/design.md, "Cluster nodes").
func (s *Set) inSlotOf(base, key string) string {
	if !slices.ContainsFunc(s.Nodes, func(n *node.Node) bool { _, ok := n.Client().(*redis.ClusterClient); return ok }) {
		return base
	}
	n, want := slot.Named(slot.Of(key)), slot.Of(key)
	if k := base + ":{" + n + "}"; slot.Of(k) == want {
		return k
	}
	return "{" + n + "}" + base
}

// Sharded reports whether some node is a Cluster or a Ring, where the keys
// of one script call must share a hash slot.
func (s *Set) Sharded() bool {
	return slices.ContainsFunc(s.Nodes, func(n *node.Node) bool { return !n.MultiKey() })
}
