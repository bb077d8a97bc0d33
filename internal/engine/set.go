package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// Set is a node set: nodes, set-wide settings, and what its locks share in
// this process. Built by package redlock; safe for concurrent use.
type Set struct {
	Nodes       []*node.Node
	Keys        keyspace.Layout // the names of the keys on the nodes
	DriftFactor float64         // in [0, 0.5); see timing.Validity
	NodeTimeout time.Duration   // bound on each node's answer; 0 derives it
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
	idOnce      sync.Once
	id          string // Identity's
	renewerOnce sync.Once
	renewer     *renewer
	checks      sync.WaitGroup // restart-quarantine INFO reads in flight
	close       closer
}

// Errors are package mutex's sentinels, for the engine's errors to match.
type Errors struct {
	NotObtained, Contended, NodesUnavailable, NotHeld, Lost, NodeTimeout, Quarantined, Closed error
	Node                                                                                      func(addr string, err error) error
}

// Timeout is how long a round waits for a node's answer after its command
// left, for a TTL: NodeTimeout, or derived ("Per-node timeout").
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

// Settle blocks until every command sent so far completed, with its checks
// and renewals; SettleRenewals, until no renewal's answers are being read.
func (s *Set) Settle() {
	for _, n := range s.Nodes {
		n.Flush()
	}
	s.checks.Wait()
	s.renewals().settle()
}
func (s *Set) SettleRenewals() { s.renewals().settle() }

// Identity names the set: a digest of the key prefix and the nodes'
// addresses (in any order), alike in every Set, in any process, so
// configured. Read it once the nodes' addresses are final (node.SetAddr).
func (s *Set) Identity() string {
	s.idOnce.Do(func() {
		addrs := make([]string, len(s.Nodes))
		for i, n := range s.Nodes {
			addrs[i] = n.Addr()
		}
		slices.Sort(addrs)
		sum := sha256.Sum256([]byte(s.Keys.Prefix + "\x00" + strings.Join(addrs, "\x00")))
		s.id = hex.EncodeToString(sum[:8])
	})
	return s.id
}
