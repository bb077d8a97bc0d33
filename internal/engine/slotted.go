package engine

import (
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/slot"
)

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
