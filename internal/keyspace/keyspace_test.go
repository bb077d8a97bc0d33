package keyspace

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slots CLUSTER KEYSLOT gives (Redis Cluster specification examples).
func TestSlot(t *testing.T) {
	assert.Equal(t, 12182, Slot("foo"))
	assert.Equal(t, 5061, Slot("bar"))
	assert.Equal(t, Slot("user1000"), Slot("{user1000}.following"))
	assert.Equal(t, Slot("{user1000}.following"), Slot("{user1000}.followers"))
	assert.Equal(t, Slot("foo{}{bar}"), Slot("foo{}{bar}"))
	assert.NotEqual(t, Slot("bar"), Slot("foo{}{bar}"), "an empty tag hashes the whole key")
	assert.Equal(t, Slot("{bar"), Slot("{bar"))
	assert.Equal(t, Slot("zap"), Slot("foo{zap}{bar}"))
}

func TestTag(t *testing.T) {
	for key, tag := range map[string]string{"a": "", "{a}b": "a", "x{a}{b}": "a", "{}a": "", "{a": "", "a}{b}": "b"} {
		assert.Equal(t, tag, Tag(key), key)
	}
}

func TestSlotTagCoversEverySlot(t *testing.T) {
	for s := range Slots {
		n := SlotTag(s)
		if !assert.Equal(t, s, Slot(n), "SlotTag(%d) = %q", s, n) || !assert.Equal(t, s, Slot("{"+n+"}x")) {
			return
		}
	}
}

// Every key kept beside a key lands in the key's hash slot, whatever braces
// the key holds; the names of earlier versions are kept where they did;
// names are unique per key and suffix (but for the names of earlier
// versions, which give K and "{K}" one: kept, as running processes use
// them); none can be a lock's key.
func TestBesideLandsInTheKeysSlot(t *testing.T) {
	l := Layout{Cluster: true}
	suffixes := []string{queue, expiries, tombstones, metadata, limit, record, PermitInfix + "0", PermitInfix + "12"}
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
			k := l.beside(key, suffix)
			require.Equal(t, Slot(key), Slot(k), "%q beside %q", k, key)
			if other, dup := seen[k]; dup && other != key+suffix && strings.Contains(k, slotInfix) {
				require.Failf(t, "two keys share a name", "%q for %q and %q", k, key+suffix, other)
			}
			seen[k] = key + suffix
			assert.True(t, l.Reserved(k), "%q is reserved", k)
		}
	}
	assert.Equal(t, "{plain}:quorumlock:q", l.beside("plain", ":quorumlock:q"), "as before")
	assert.Equal(t, "{t}x:quorumlock:q", l.beside("{t}x", ":quorumlock:q"), "as before")
	assert.Equal(t, "plain:quorumlock:q", Layout{}.beside("plain", ":quorumlock:q"))
}
