// Package keyspace names what the library keeps on the nodes, the lock keys
// and the records beside them, and computes the Redis Cluster hash slots
// those names must share (a script's keys must be in one slot).
package keyspace

import (
	"strconv"
	"strings"
	"sync"
)

// The names of what the library keeps on the nodes besides the lock keys;
// no lock may be named so (Reserved).
const (
	PermitInfix = infix + "permit:" // joins a semaphore's name and a permit's number
	RWSuffix    = infix + "rw"      // follows a read-write lock's name in its key's
	infix       = ":quorumlock:"
	// Kept beside a lock key: see the methods naming them.
	queue, expiries, tombstones = infix + "q", infix + "qx", infix + "rel"
	metadata, limit, record     = infix + "md", infix + "limit", infix + "idem"
	slotInfix                   = infix + "of:" // see beside
	// One per node, without TTL: the restart marker, the fencing counter.
	marker, fence = "quorumlock:node", "quorumlock:fence"
)

// Layout names the keys of one node set.
type Layout struct {
	Prefix  string // put before every lock name to form its key
	Cluster bool   // some node is a Redis Cluster: a script's keys must share a hash slot
}

// Reserved reports whether the key of a lock named name is one the library
// keeps for itself: the two would collide.
func (l Layout) Reserved(name string) bool {
	key := l.Prefix + name
	for _, base := range [...]string{l.Prefix + marker, l.Prefix + fence} {
		if key == base || strings.HasPrefix(key, base+":{") || strings.HasPrefix(key, "{") && strings.HasSuffix(key, "}"+base) {
			return true
		}
	}
	for _, suffix := range [...]string{queue, expiries, tombstones, metadata, RWSuffix, limit, record} {
		if strings.HasSuffix(key, suffix) {
			return true
		}
	}
	return strings.Contains(key, PermitInfix) || strings.Contains(key, slotInfix) || strings.Contains(key, tombstones+":")
}

// Queue and the methods below name what is kept beside a lock key: its
// waiters' queue and their expiries, the prefix of its release tombstones
// (one key per token), a Meta lock's metadata record, an idempotency key's
// record; a semaphore's limit record and permit i, beside its key.
func (l Layout) Queue(key string) (string, string) {
	return l.beside(key, queue), l.beside(key, expiries)
}
func (l Layout) Tombstones(key string) string    { return l.beside(key, tombstones) }
func (l Layout) Metadata(key string) string      { return l.beside(key, metadata) }
func (l Layout) Record(key string) string        { return l.beside(key, record) }
func (l Layout) Limit(key string) string         { return l.beside(key, limit) }
func (l Layout) Permit(key string, i int) string { return l.beside(key, PermitInfix+strconv.Itoa(i)) }

// beside names the key ending in suffix kept beside key: key+suffix, or on
// Cluster nodes a key in key's hash slot (docs/design.md, "Cluster nodes").
func (l Layout) beside(key, suffix string) string {
	switch {
	case !l.Cluster || Tag(key) != "":
		return key + suffix
	case !strings.Contains(key, "}"):
		return "{" + key + "}" + suffix
	}
	return "{" + SlotTag(Slot(key)) + "}" + slotInfix + key + suffix
}

// Fence names the fencing counter a lock on key draws from, Marker the
// restart marker its acquisition reads: the set's one, or on Cluster nodes
// the one of key's hash slot (docs/design.md, "Cluster nodes").
func (l Layout) Fence(key string) string  { return l.inSlotOf(l.Prefix+fence, key) }
func (l Layout) Marker(key string) string { return l.inSlotOf(l.Prefix+marker, key) }

func (l Layout) inSlotOf(base, key string) string {
	if !l.Cluster {
		return base
	}
	tag, want := SlotTag(Slot(key)), Slot(key)
	if k := base + ":{" + tag + "}"; Slot(k) == want {
		return k
	}
	return "{" + tag + "}" + base
}

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Tag returns the part of key that Redis Cluster hashes when the key has
// one: what lies between the first "{" and the next "}", if not empty;
// otherwise "".
func Tag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return ""
	}
	return key[open+1 : open+1+end]
}

// Slot returns key's hash slot, as CLUSTER KEYSLOT does.
func Slot(key string) int {
	if tag := Tag(key); tag != "" {
		key = tag
	}
	return int(crc16(key) % Slots)
}

// SlotTag returns a short string whose hash slot is slot (0 <= slot <
// Slots): "{" + SlotTag(s) + "}" in a key puts it in slot s.
func SlotTag(slot int) string {
	namesOnce.Do(func() {
		left := Slots
		for i := 0; left > 0; i++ {
			s := strconv.FormatInt(int64(i), 36)
			if n := crc16(s) % Slots; names[n] == "" {
				names[n] = s
				left--
			}
		}
	})
	return names[slot]
}

// names[s] is SlotTag(s), filled at first use (about 170,000 hashes, 2ms).
var (
	names     [Slots]string
	namesOnce sync.Once
)

// crc16 is CRC-16/XMODEM, Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
