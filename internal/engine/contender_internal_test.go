package engine

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/slot"
)

// Every key kept beside a key lands in the key's hash slot, whatever braces
// the key holds; the names of earlier versions are kept where they did;
// names are unique per key and suffix (but for the names of earlier
// versions, which give K and "{K}" one: kept, as running processes use
// them); none can be a lock's key.
func TestBesideLandsInTheKeysSlot(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	s := &Set{Nodes: []*node.Node{node.New(c, "c", clock.Real())}}
	require.True(t, s.Sharded())
	suffixes := []string{auxInfix + auxQueue, auxInfix + auxExpiries, auxInfix + auxTombstones, auxInfix + auxMetadata,
		LimitSuffix, RecordSuffix, PermitInfix + "0", PermitInfix + "12"}
	keys := []string{"a}b", "lock:{}", "{}x", "x{y}z", "svc}:x", "plain", "{t}x", "{bar", "}", "{}", "{", "a{", "}{a}", "{{a}}", "x}y{z}"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 { // random keys of braces and letters
		b := make([]byte, 1+rng.IntN(8))
		for i := range b {
			b[i] = "{}ab:"[rng.IntN(5)]
		}
		keys = append(keys, string(b))
	}
	seen := map[string]string{}
	for _, key := range keys {
		for _, suffix := range suffixes {
			k := s.Beside(key, suffix)
			require.Equal(t, slot.Of(key), slot.Of(k), "%q beside %q", k, key)
			if other, dup := seen[k]; dup && other != key+suffix && strings.Contains(k, slotAuxInfix) {
				require.Failf(t, "two keys share a name", "%q for %q and %q", k, key+suffix, other)
			}
			seen[k] = key + suffix
			assert.True(t, s.Reserved(k), "%q is reserved", k)
		}
	}
	assert.Equal(t, "{plain}:quorumlock:q", s.Beside("plain", ":quorumlock:q"), "as before")
	assert.Equal(t, "{t}x:quorumlock:q", s.Beside("{t}x", ":quorumlock:q"), "as before")
	assert.Equal(t, "plain:quorumlock:q", (&Set{Nodes: []*node.Node{node.New(nil, "a", clock.Real())}}).Beside("plain", ":quorumlock:q"))
}
