package engine

import (
	"cmp"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Spec is what a lock type asks of the engine for one name.
type Spec struct {
	Kind                *Kind         // nil: MutexKind
	Name                string        // in errors
	Names               []string      // the names whose keys the lock takes at once, sorted and distinct; nil: Name
	Key                 string        // the key when not Keys.Prefix+Name (a permit's on sharded nodes); one name only
	Primitive, Observed string        // what observers are told ("": the kind's name, Name)
	TTL                 time.Duration // whole milliseconds, at least 1ms
	RetryMin, RetryMax  time.Duration
	AutoExtend          bool
	ExtendInterval      time.Duration // 0: TTL/3
	MaxExtends          int           // 0: no limit
	Fencing             bool
	// Record is a key beside the lock's that the kind's scripts read (a
	// limit, a result, metadata); refusals for it fail at once with Conflict's error.
	Record   string
	Limit    int // PermitKind's ARGV[9]; 0: none
	Conflict func(stored string) error
	Metadata string // MetaKind's ARGV[9]
}

// Contender is a Mutex's side in the engine: it holds at most one
// acquisition at a time; its caller serializes its calls (the op slot).
type Contender struct {
	set         *Set
	spec        Spec
	kind        *Kind
	key         string // the first of keys
	keys        []string
	drift       time.Duration
	acquireKeys keyset   // per key: key, queue, expiries; then Record; then marker, fence
	releaseKeys keyset   // per key: key, queue, expiries, tombstones; then Record
	renewKeys   keyset   // the keys; a permit's, then its record
	fenceKeys   keyset   // key, its fencing counter; with Spec.Fencing only
	channel     string   // key's release channel; "" without notifications
	channels    []string // every key's release channel
	// the TTL in ms, channel, tombstone's life (min(TTL, 2s)) and ARGV[9] (nil: none)
	ttlBoxed, channelBoxed, tombstoneBoxed, limitArg any

	mu   sync.Mutex
	hold *Hold // the latest acquisition; nil before the first

	attempts int // made by the latest Acquire; read under the op slot
}

// NewContender returns a contender for spec's names, already checked, over set.
func NewContender(set *Set, spec Spec) *Contender {
	keys := make([]string, max(len(spec.Names), 1))
	keys[0] = cmp.Or(spec.Key, set.Keys.Prefix+spec.Name) // unless Names
	for i, name := range spec.Names {
		keys[i] = set.Keys.Prefix + name
	}
	ttl := spec.TTL.Milliseconds()
	l := &Contender{set: set, spec: spec, kind: cmp.Or(spec.Kind, MutexKind), key: keys[0], keys: keys,
		drift:    timing.DriftAllowance(spec.TTL, set.DriftFactor),
		ttlBoxed: ttl, tombstoneBoxed: max(min(ttl, 2000), 1)}
	acquire, release, renew := make([]string, 0, 3*len(keys)+3), make([]string, 0, 4*len(keys)+1), keys
	for _, key := range keys {
		queue, expiries := set.Keys.Queue(key)
		acquire = append(acquire, key, queue, expiries)
		release = append(release, key, queue, expiries, set.Keys.Tombstones(key))
	}
	if spec.Record != "" {
		acquire, release = append(acquire, spec.Record), append(release, spec.Record)
		if l.kind == PermitKind || l.kind == MetaKind { // after each key in permitrenew.lua
			renew = []string{keys[0], spec.Record}
		}
	}
	switch {
	case l.kind == MetaKind:
		l.limitArg = spec.Metadata
	case spec.Limit > 0:
		l.limitArg = spec.Limit
	}
	if spec.Fencing || set.Quarantine > 0 {
		acquire = append(acquire, set.Keys.Marker(l.key), set.Keys.Fence(l.key))
	}
	if spec.Fencing {
		l.fenceKeys = newKeyset(l.key, set.Keys.Fence(l.key))
	}
	l.acquireKeys, l.releaseKeys, l.renewKeys = newKeyset(acquire...), newKeyset(release...), newKeyset(renew...)
	if set.Notify {
		for _, key := range keys {
			l.channels = append(l.channels, notify.Channel(key))
		}
		l.channel = l.channels[0]
	}
	l.channelBoxed = l.channel
	return l
}

// appendRenewArgs appends one lease's renew arguments to dst: token, TTL,
// restore ("1", "0"), then the key count, or the record to restore.
func (l *Contender) appendRenewArgs(dst []any, h *Hold, restore uint64) []any {
	dst = append(dst, h.token, l.ttlBoxed, restoreArg[restore])
	if len(l.keys) > 1 {
		return append(dst, len(l.keys))
	} else if len(l.renewKeys.names) > 1 {
		return append(dst, [2]any{"", h.record}[restore])
	}
	return dst
}

// releaseArgs are the release script's arguments (tombstone 0: none).
func (l *Contender) releaseArgs(token, mode string, p place, tombstone any) []any {
	return []any{token, l.channelBoxed, mode, p.id, p.ticket, p.life.Milliseconds(), tombstone}
}

// Key and Set return the lock's (first) key and its node set.
func (l *Contender) Key() string { return l.key }
func (l *Contender) Set() *Set   { return l.set }

// timeout is the per-node timeout of this lock's rounds; budget, how long a
// round started at start may wait before no validity is left.
func (l *Contender) timeout() time.Duration { return l.set.Timeout(l.spec.TTL) }

func (l *Contender) budget(start time.Time) time.Duration {
	return l.spec.TTL - l.drift - l.set.Clock.Since(start)
}

// Current returns the latest acquisition if still held (not released), or nil.
func (l *Contender) Current() *Hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold != nil && l.hold.held {
		return l.hold
	}
	return nil
}

// Latest returns the latest acquisition, held or not, or nil.
func (l *Contender) Latest() *Hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold
}

// extendInterval is between two automatic renewals; lossMargin, how long
// before its validity ends an unrenewed lease is declared lost.
func (l *Contender) extendInterval() time.Duration {
	return cmp.Or(l.spec.ExtendInterval, l.spec.TTL/3)
}

func (l *Contender) lossMargin() time.Duration { return l.spec.TTL / 10 }
