package node

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
)

// Set is the configuration a node set (package redlock) hands to each Mutex.
// It is read-only once built and shared by every Mutex of the set.
type Set struct {
	Nodes       []*Node
	KeyPrefix   string        // prepended to every lock name to form the key
	DriftFactor float64       // in [0, 0.5); see clock.Validity
	NodeTimeout time.Duration // bound on each node's answer; 0 derives it from the TTL
	Clock       clock.Clock
	Quarantine  time.Duration // restart quarantine; 0: off
	Notify      bool          // releases publish, waiters subscribe
	ExtScript   *redis.Script // this set's own extended acquire script (quarantine); nil: the shared one

	hubOnce sync.Once
	hub     *hub // release notifications of this set's waiters

	gatesMu sync.Mutex
	gates   map[string]*Gate // keys with an acquire attempt in progress or waiting (BeginAttempt)
}

// Keys the library keeps on every node besides the locks, without TTL: one
// marker per node (restart detection) and one fencing counter per node set.
// They are named after the set's key prefix; no lock may use these names.
const (
	MarkerName = "quorumlock:node"
	FenceName  = "quorumlock:fence"
)

// MarkerKey returns the key of the node marker for this set.
func (s *Set) MarkerKey() string { return s.KeyPrefix + MarkerName }

// FenceKey returns the key of the fencing counter for this set.
func (s *Set) FenceKey() string { return s.KeyPrefix + FenceName }

// Bounds of the per-node timeout derived from a TTL.
const (
	MinDerivedTimeout = 20 * time.Millisecond
	MaxDerivedTimeout = 500 * time.Millisecond
)

// Timeout returns how long one round waits for a node's answer under a lock of
// the given TTL: NodeTimeout when set, otherwise ttl/100 kept within
// [MinDerivedTimeout, MaxDerivedTimeout] (80ms for an 8s TTL).
func (s *Set) Timeout(ttl time.Duration) time.Duration {
	if s.NodeTimeout > 0 {
		return s.NodeTimeout
	}
	return min(max(ttl/100, MinDerivedTimeout), MaxDerivedTimeout)
}
