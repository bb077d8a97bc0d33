package engine

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Spec is what a lock type asks of the engine for one name.
type Spec struct {
	Kind           *Kind // nil: Mutex
	Name           string
	TTL            time.Duration // whole milliseconds, at least 1ms
	Tries          int           // 0: no limit
	RetryMin       time.Duration
	RetryMax       time.Duration
	AutoExtend     bool
	ExtendInterval time.Duration // 0: TTL/3
	MaxExtends     int           // 0: no limit
	Fencing        bool
}

// Lock is one lockable name on a set, holding at most one acquisition at a
// time: the state behind a Mutex. Its calls are serialized by an op slot.
type Lock struct {
	set   *Set
	spec  Spec
	kind  *Kind
	key   string
	drift time.Duration
	// Script arguments that never change.
	acquireKeys keyset // key, queue, expiries[, marker, fence]
	releaseKeys keyset // key, queue, expiries, tombstones
	renewKeys   keyset // key
	fenceKeys   keyset // key, the set's fencing counter
	ttlArg      int64
	channel     string // release channel; "" without notifications
	// ttlArg, channel and the tombstone's life as script arguments, boxed once
	ttlBoxed, channelBoxed, tombstoneBoxed any

	op chan struct{} // one slot: the goroutine holding it may act

	mu   sync.Mutex
	hold *Hold // the latest acquisition; nil before the first

	attempts int // made by the latest Acquire; read under the op slot
}

// NewLock returns the lock on spec.Name over set. The name and spec must
// have been checked by the caller.
func NewLock(set *Set, spec Spec) *Lock {
	key := set.KeyPrefix + spec.Name
	l := &Lock{
		set:    set,
		spec:   spec,
		kind:   spec.Kind,
		key:    key,
		drift:  timing.DriftAllowance(spec.TTL, set.DriftFactor),
		ttlArg: spec.TTL.Milliseconds(),
		op:     make(chan struct{}, 1),
	}
	if l.kind == nil {
		l.kind = Mutex
	}
	sharded := false
	for _, n := range set.Nodes {
		sharded = sharded || !n.MultiKey()
	}
	aux := auxKey
	if sharded {
		aux = slottedAuxKey
	}
	queue, expiries, tombs := aux(key, auxQueue), aux(key, auxExpiries), aux(key, auxTombstones)
	acquire := []string{key, queue, expiries}
	if spec.Fencing || set.Quarantine > 0 {
		acquire = append(acquire, set.MarkerKey(), set.FenceKey())
	}
	l.acquireKeys = newKeyset(acquire...)
	l.releaseKeys = newKeyset(key, queue, expiries, tombs)
	l.renewKeys = newKeyset(key)
	l.fenceKeys = newKeyset(key, set.FenceKey())
	if set.Notify {
		l.channel = notify.Channel(key)
	}
	l.ttlBoxed, l.channelBoxed, l.tombstoneBoxed = l.ttlArg, l.channel, l.tombstoneLife()
	return l
}

// auxKey names a key the lock keeps beside key: key + ":quorumlock:<what>",
// under the same key prefix (an ACL on the prefix covers it).
func auxKey(key, what string) string { return key + auxInfix + what }

// PermitInfix joins a semaphore's name and the number of one of its permits
// in the name of the lock that is that permit.
const PermitInfix = ":quorumlock:permit:"

// RWInfix joins a read-write lock's name and one of its parts (its gate,
// its reader slots) in the name of the lock that is that part.
const RWInfix = ":quorumlock:rw:"

// What a lock keeps beside its key: its waiters' queue, their expiries and
// its release tombstones.
const (
	auxInfix                             = ":quorumlock:"
	auxQueue, auxExpiries, auxTombstones = "q", "qx", "rel"
)

// Reserved reports whether key is one the library keeps for itself: the
// set's node marker or fencing counter, or a key kept beside some lock key.
// No lock may be named so: its key and the other lock's would collide.
func (s *Set) Reserved(key string) bool {
	if key == s.MarkerKey() || key == s.FenceKey() {
		return true
	}
	for _, what := range []string{auxQueue, auxExpiries, auxTombstones} {
		if strings.HasSuffix(key, auxInfix+what) {
			return true
		}
	}
	return strings.Contains(key, PermitInfix) || strings.Contains(key, RWInfix)
}

// slottedAuxKey is auxKey for sharded nodes (Cluster or Ring clients), where
// the key must also land in key's hash slot: a key without a hash tag is
// wrapped in one, "{key}:quorumlock:<what>".
func slottedAuxKey(key, what string) string {
	if open := strings.IndexByte(key, '{'); open < 0 || strings.IndexByte(key[open+1:], '}') <= 0 {
		return "{" + key + "}" + auxInfix + what
	}
	return auxKey(key, what)
}

// Key returns the lock key.
func (l *Lock) Key() string { return l.key }

// Name returns the lock's name.
func (l *Lock) Name() string { return l.spec.Name }

// Set returns the lock's node set.
func (l *Lock) Set() *Set { return l.set }

// timeout returns the per-node timeout for this lock's rounds.
func (l *Lock) timeout() time.Duration { return l.set.Timeout(l.spec.TTL) }

// budget returns how long a round that started at start may still wait
// before no validity can be left.
func (l *Lock) budget(start time.Time) time.Duration {
	return l.spec.TTL - l.drift - l.set.Clock.Since(start)
}

// Begin takes the lock's op slot, waiting for a call in progress to return.
// A free slot is taken even if ctx is already done.
func (l *Lock) Begin(ctx context.Context) error {
	select {
	case l.op <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// End gives the op slot back.
func (l *Lock) End() { <-l.op }

// Current returns the latest acquisition if it is still held (not released
// by Release), or nil.
func (l *Lock) Current() *Hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold != nil && l.hold.held {
		return l.hold
	}
	return nil
}

// Latest returns the latest acquisition, held or not, or nil.
func (l *Lock) Latest() *Hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hold
}

// extendInterval is the time between the starts of two automatic renewals.
func (l *Lock) extendInterval() time.Duration {
	if l.spec.ExtendInterval > 0 {
		return l.spec.ExtendInterval
	}
	return l.spec.TTL / 3
}

// lossMargin is how long before the end of the validity a lease that was
// not renewed is declared lost: TTL/10.
func (l *Lock) lossMargin() time.Duration { return l.spec.TTL / 10 }
