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

// Every name, byte for byte as the versions before this package gave them
// (running processes of those versions use them): on plain and Cluster
// nodes, under prefixes with and without braces; and the names Reserved
// refuses among some near misses.
func TestNamesAsBefore(t *testing.T) {
	for _, tc := range []struct {
		cluster      bool
		prefix, name string
		want         []string // queue, expiries, tombstones, metadata, record, limit, permit 3, fence, marker
	}{
		{false, "", "a", []string{"a:quorumlock:q", "a:quorumlock:qx", "a:quorumlock:rel", "a:quorumlock:md", "a:quorumlock:idem", "a:quorumlock:limit", "a:quorumlock:permit:3", "quorumlock:fence", "quorumlock:node"}},
		{false, "", "{t}x", []string{"{t}x:quorumlock:q", "{t}x:quorumlock:qx", "{t}x:quorumlock:rel", "{t}x:quorumlock:md", "{t}x:quorumlock:idem", "{t}x:quorumlock:limit", "{t}x:quorumlock:permit:3", "quorumlock:fence", "quorumlock:node"}},
		{false, "", "a}b", []string{"a}b:quorumlock:q", "a}b:quorumlock:qx", "a}b:quorumlock:rel", "a}b:quorumlock:md", "a}b:quorumlock:idem", "a}b:quorumlock:limit", "a}b:quorumlock:permit:3", "quorumlock:fence", "quorumlock:node"}},
		{false, "p:", "a", []string{"p:a:quorumlock:q", "p:a:quorumlock:qx", "p:a:quorumlock:rel", "p:a:quorumlock:md", "p:a:quorumlock:idem", "p:a:quorumlock:limit", "p:a:quorumlock:permit:3", "p:quorumlock:fence", "p:quorumlock:node"}},
		{false, "p:", "{t}x", []string{"p:{t}x:quorumlock:q", "p:{t}x:quorumlock:qx", "p:{t}x:quorumlock:rel", "p:{t}x:quorumlock:md", "p:{t}x:quorumlock:idem", "p:{t}x:quorumlock:limit", "p:{t}x:quorumlock:permit:3", "p:quorumlock:fence", "p:quorumlock:node"}},
		{false, "p:", "a}b", []string{"p:a}b:quorumlock:q", "p:a}b:quorumlock:qx", "p:a}b:quorumlock:rel", "p:a}b:quorumlock:md", "p:a}b:quorumlock:idem", "p:a}b:quorumlock:limit", "p:a}b:quorumlock:permit:3", "p:quorumlock:fence", "p:quorumlock:node"}},
		{false, "{x}p:", "a", []string{"{x}p:a:quorumlock:q", "{x}p:a:quorumlock:qx", "{x}p:a:quorumlock:rel", "{x}p:a:quorumlock:md", "{x}p:a:quorumlock:idem", "{x}p:a:quorumlock:limit", "{x}p:a:quorumlock:permit:3", "{x}p:quorumlock:fence", "{x}p:quorumlock:node"}},
		{false, "{x}p:", "{t}x", []string{"{x}p:{t}x:quorumlock:q", "{x}p:{t}x:quorumlock:qx", "{x}p:{t}x:quorumlock:rel", "{x}p:{t}x:quorumlock:md", "{x}p:{t}x:quorumlock:idem", "{x}p:{t}x:quorumlock:limit", "{x}p:{t}x:quorumlock:permit:3", "{x}p:quorumlock:fence", "{x}p:quorumlock:node"}},
		{false, "{x}p:", "a}b", []string{"{x}p:a}b:quorumlock:q", "{x}p:a}b:quorumlock:qx", "{x}p:a}b:quorumlock:rel", "{x}p:a}b:quorumlock:md", "{x}p:a}b:quorumlock:idem", "{x}p:a}b:quorumlock:limit", "{x}p:a}b:quorumlock:permit:3", "{x}p:quorumlock:fence", "{x}p:quorumlock:node"}},
		{false, "a}", "a", []string{"a}a:quorumlock:q", "a}a:quorumlock:qx", "a}a:quorumlock:rel", "a}a:quorumlock:md", "a}a:quorumlock:idem", "a}a:quorumlock:limit", "a}a:quorumlock:permit:3", "a}quorumlock:fence", "a}quorumlock:node"}},
		{false, "a}", "{t}x", []string{"a}{t}x:quorumlock:q", "a}{t}x:quorumlock:qx", "a}{t}x:quorumlock:rel", "a}{t}x:quorumlock:md", "a}{t}x:quorumlock:idem", "a}{t}x:quorumlock:limit", "a}{t}x:quorumlock:permit:3", "a}quorumlock:fence", "a}quorumlock:node"}},
		{false, "a}", "a}b", []string{"a}a}b:quorumlock:q", "a}a}b:quorumlock:qx", "a}a}b:quorumlock:rel", "a}a}b:quorumlock:md", "a}a}b:quorumlock:idem", "a}a}b:quorumlock:limit", "a}a}b:quorumlock:permit:3", "a}quorumlock:fence", "a}quorumlock:node"}},
		{false, "{p:", "a", []string{"{p:a:quorumlock:q", "{p:a:quorumlock:qx", "{p:a:quorumlock:rel", "{p:a:quorumlock:md", "{p:a:quorumlock:idem", "{p:a:quorumlock:limit", "{p:a:quorumlock:permit:3", "{p:quorumlock:fence", "{p:quorumlock:node"}},
		{false, "{p:", "{t}x", []string{"{p:{t}x:quorumlock:q", "{p:{t}x:quorumlock:qx", "{p:{t}x:quorumlock:rel", "{p:{t}x:quorumlock:md", "{p:{t}x:quorumlock:idem", "{p:{t}x:quorumlock:limit", "{p:{t}x:quorumlock:permit:3", "{p:quorumlock:fence", "{p:quorumlock:node"}},
		{false, "{p:", "a}b", []string{"{p:a}b:quorumlock:q", "{p:a}b:quorumlock:qx", "{p:a}b:quorumlock:rel", "{p:a}b:quorumlock:md", "{p:a}b:quorumlock:idem", "{p:a}b:quorumlock:limit", "{p:a}b:quorumlock:permit:3", "{p:quorumlock:fence", "{p:quorumlock:node"}},
		{true, "", "a", []string{"{a}:quorumlock:q", "{a}:quorumlock:qx", "{a}:quorumlock:rel", "{a}:quorumlock:md", "{a}:quorumlock:idem", "{a}:quorumlock:limit", "{a}:quorumlock:permit:3", "quorumlock:fence:{a}", "quorumlock:node:{a}"}},
		{true, "", "{t}x", []string{"{t}x:quorumlock:q", "{t}x:quorumlock:qx", "{t}x:quorumlock:rel", "{t}x:quorumlock:md", "{t}x:quorumlock:idem", "{t}x:quorumlock:limit", "{t}x:quorumlock:permit:3", "quorumlock:fence:{t}", "quorumlock:node:{t}"}},
		{true, "", "a}b", []string{"{4w2}:quorumlock:of:a}b:quorumlock:q", "{4w2}:quorumlock:of:a}b:quorumlock:qx", "{4w2}:quorumlock:of:a}b:quorumlock:rel", "{4w2}:quorumlock:of:a}b:quorumlock:md", "{4w2}:quorumlock:of:a}b:quorumlock:idem", "{4w2}:quorumlock:of:a}b:quorumlock:limit", "{4w2}:quorumlock:of:a}b:quorumlock:permit:3", "quorumlock:fence:{4w2}", "quorumlock:node:{4w2}"}},
		{true, "p:", "a", []string{"{p:a}:quorumlock:q", "{p:a}:quorumlock:qx", "{p:a}:quorumlock:rel", "{p:a}:quorumlock:md", "{p:a}:quorumlock:idem", "{p:a}:quorumlock:limit", "{p:a}:quorumlock:permit:3", "p:quorumlock:fence:{a8q}", "p:quorumlock:node:{a8q}"}},
		{true, "p:", "{t}x", []string{"p:{t}x:quorumlock:q", "p:{t}x:quorumlock:qx", "p:{t}x:quorumlock:rel", "p:{t}x:quorumlock:md", "p:{t}x:quorumlock:idem", "p:{t}x:quorumlock:limit", "p:{t}x:quorumlock:permit:3", "p:quorumlock:fence:{t}", "p:quorumlock:node:{t}"}},
		{true, "p:", "a}b", []string{"{cov}:quorumlock:of:p:a}b:quorumlock:q", "{cov}:quorumlock:of:p:a}b:quorumlock:qx", "{cov}:quorumlock:of:p:a}b:quorumlock:rel", "{cov}:quorumlock:of:p:a}b:quorumlock:md", "{cov}:quorumlock:of:p:a}b:quorumlock:idem", "{cov}:quorumlock:of:p:a}b:quorumlock:limit", "{cov}:quorumlock:of:p:a}b:quorumlock:permit:3", "p:quorumlock:fence:{cov}", "p:quorumlock:node:{cov}"}},
		{true, "{x}p:", "a", []string{"{x}p:a:quorumlock:q", "{x}p:a:quorumlock:qx", "{x}p:a:quorumlock:rel", "{x}p:a:quorumlock:md", "{x}p:a:quorumlock:idem", "{x}p:a:quorumlock:limit", "{x}p:a:quorumlock:permit:3", "{x}p:quorumlock:fence:{x}", "{x}p:quorumlock:node:{x}"}},
		{true, "{x}p:", "{t}x", []string{"{x}p:{t}x:quorumlock:q", "{x}p:{t}x:quorumlock:qx", "{x}p:{t}x:quorumlock:rel", "{x}p:{t}x:quorumlock:md", "{x}p:{t}x:quorumlock:idem", "{x}p:{t}x:quorumlock:limit", "{x}p:{t}x:quorumlock:permit:3", "{x}p:quorumlock:fence:{x}", "{x}p:quorumlock:node:{x}"}},
		{true, "{x}p:", "a}b", []string{"{x}p:a}b:quorumlock:q", "{x}p:a}b:quorumlock:qx", "{x}p:a}b:quorumlock:rel", "{x}p:a}b:quorumlock:md", "{x}p:a}b:quorumlock:idem", "{x}p:a}b:quorumlock:limit", "{x}p:a}b:quorumlock:permit:3", "{x}p:quorumlock:fence:{x}", "{x}p:quorumlock:node:{x}"}},
		{true, "a}", "a", []string{"{439}:quorumlock:of:a}a:quorumlock:q", "{439}:quorumlock:of:a}a:quorumlock:qx", "{439}:quorumlock:of:a}a:quorumlock:rel", "{439}:quorumlock:of:a}a:quorumlock:md", "{439}:quorumlock:of:a}a:quorumlock:idem", "{439}:quorumlock:of:a}a:quorumlock:limit", "{439}:quorumlock:of:a}a:quorumlock:permit:3", "a}quorumlock:fence:{439}", "a}quorumlock:node:{439}"}},
		{true, "a}", "{t}x", []string{"a}{t}x:quorumlock:q", "a}{t}x:quorumlock:qx", "a}{t}x:quorumlock:rel", "a}{t}x:quorumlock:md", "a}{t}x:quorumlock:idem", "a}{t}x:quorumlock:limit", "a}{t}x:quorumlock:permit:3", "a}quorumlock:fence:{t}", "a}quorumlock:node:{t}"}},
		{true, "a}", "a}b", []string{"{4it}:quorumlock:of:a}a}b:quorumlock:q", "{4it}:quorumlock:of:a}a}b:quorumlock:qx", "{4it}:quorumlock:of:a}a}b:quorumlock:rel", "{4it}:quorumlock:of:a}a}b:quorumlock:md", "{4it}:quorumlock:of:a}a}b:quorumlock:idem", "{4it}:quorumlock:of:a}a}b:quorumlock:limit", "{4it}:quorumlock:of:a}a}b:quorumlock:permit:3", "a}quorumlock:fence:{4it}", "a}quorumlock:node:{4it}"}},
		{true, "{p:", "a", []string{"{{p:a}:quorumlock:q", "{{p:a}:quorumlock:qx", "{{p:a}:quorumlock:rel", "{{p:a}:quorumlock:md", "{{p:a}:quorumlock:idem", "{{p:a}:quorumlock:limit", "{{p:a}:quorumlock:permit:3", "{d4g}{p:quorumlock:fence", "{d4g}{p:quorumlock:node"}},
		{true, "{p:", "{t}x", []string{"{p:{t}x:quorumlock:q", "{p:{t}x:quorumlock:qx", "{p:{t}x:quorumlock:rel", "{p:{t}x:quorumlock:md", "{p:{t}x:quorumlock:idem", "{p:{t}x:quorumlock:limit", "{p:{t}x:quorumlock:permit:3", "{2z5}{p:quorumlock:fence", "{2z5}{p:quorumlock:node"}},
		{true, "{p:", "a}b", []string{"{p:a}b:quorumlock:q", "{p:a}b:quorumlock:qx", "{p:a}b:quorumlock:rel", "{p:a}b:quorumlock:md", "{p:a}b:quorumlock:idem", "{p:a}b:quorumlock:limit", "{p:a}b:quorumlock:permit:3", "{a8q}{p:quorumlock:fence", "{a8q}{p:quorumlock:node"}},
	} {
		l, key := Layout{Prefix: tc.prefix, Cluster: tc.cluster}, tc.prefix+tc.name
		q, x := l.Queue(key)
		got := []string{q, x, l.Tombstones(key), l.Metadata(key), l.Record(key), l.Limit(key), l.Permit(key, 3), l.Fence(key), l.Marker(key)}
		assert.Equal(t, tc.want, got, "%+v", tc)
	}
	names := []string{"quorumlock:fence", "quorumlock:node", "quorumlock:fence:{a}", "{a}quorumlock:fence", "{a}quorumlock:node", "x:quorumlock:q", "x:quorumlock:rw", "x:quorumlock:permit:1", "x:quorumlock:of:y", "x:quorumlock:rel:tok", "x:quorumlock:limit", "x:quorumlock:idem", "x:quorumlock:md", "x:quorumlock:qx", "x", "quorumlock:fencex", "x:quorumlock:rel", "quorumlock:fence:x", "x:quorumlock:other", "p:quorumlock:fence", "a{b}quorumlock:fence"}
	for prefix, want := range map[string][]string{
		"":   []string{"quorumlock:fence", "quorumlock:node", "quorumlock:fence:{a}", "{a}quorumlock:fence", "{a}quorumlock:node", "x:quorumlock:q", "x:quorumlock:rw", "x:quorumlock:permit:1", "x:quorumlock:of:y", "x:quorumlock:rel:tok", "x:quorumlock:limit", "x:quorumlock:idem", "x:quorumlock:md", "x:quorumlock:qx", "x:quorumlock:rel"},
		"p:": []string{"quorumlock:fence", "quorumlock:node", "quorumlock:fence:{a}", "x:quorumlock:q", "x:quorumlock:rw", "x:quorumlock:permit:1", "x:quorumlock:of:y", "x:quorumlock:rel:tok", "x:quorumlock:limit", "x:quorumlock:idem", "x:quorumlock:md", "x:quorumlock:qx", "x:quorumlock:rel"},
	} {
		var got []string
		for _, name := range names {
			if (Layout{Prefix: prefix}).Reserved(name) {
				got = append(got, name)
			}
		}
		assert.Equal(t, want, got, "prefix %q", prefix)
	}
}
