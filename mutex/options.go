package mutex

import (
	"cmp"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// MaxNameLen is the longest lock name accepted, key prefix included, in
// bytes: a longer one is a bug, and every node would store it. A Semaphore's
// and an RWMutex's keys add a suffix to the name, which counts too.
const MaxNameLen = 4096

// MaxNames is the most names a multi-name lock takes: each attempt is one
// script call per node over every name, which blocks the node while it runs
// (100,000 names blocked every node for 4 to 5s in a review; 1,000 names
// lock in about 3ms on loopback).
const MaxNames = 1000

// The smallest TTLs accepted (docs/design.md, "Smallest TTL"); a smaller one
// is reported as ErrInvalid by every call, with nothing sent.
const (
	// MinTTL is the smallest TTL of a lock: below it, the drift allowance
	// (2ms + TTL/100) and one round trip on a busy machine leave almost no
	// validity, and the loss warning (TTL/10 early) is under a millisecond.
	MinTTL = 10 * time.Millisecond
	// MinLeaseTTL is the smallest TTL of a lock with WithAutoExtend: the
	// renewal due at TTL/3 must be able to wait 50ms for its answers (the
	// shortest per-node timeout the library derives) and still beat the
	// loss deadline, the validity's end minus TTL/10.
	MinLeaseTTL = 100 * time.Millisecond
)

// renewalWindow is how long a renewal must be able to wait for its answers
// before the loss deadline: the shortest derived per-node timeout.
const renewalWindow = 50 * time.Millisecond

// Defaults of the retry delays (WithRetryDelay); the default TTL is
// timing.DefaultTTL.
const (
	defaultRetryDelayMin = 4 * time.Millisecond
	defaultRetryDelayMax = 256 * time.Millisecond
)

// Option configures one Mutex; options apply in order. Invalid values are not
// clamped: every method of the Mutex reports them, matching ErrInvalid.
type Option func(*config)

type config struct {
	ttl            time.Duration
	tries          int
	retryDelayMin  time.Duration
	retryDelayMax  time.Duration
	autoExtend     bool
	extendInterval time.Duration
	maxExtends     int
	fencing        bool
	metadata       *string // WithMetadata; nil: none
}

// configure returns the defaults with opts applied in order, nil ones skipped.
func configure(opts []Option) config {
	c := config{ttl: timing.DefaultTTL, retryDelayMin: defaultRetryDelayMin, retryDelayMax: defaultRetryDelayMax}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	return c
}

// WithTTL sets the lock key's TTL on each node (the PX of SET key token NX PX
// ttl), default 8s. It is sent in whole milliseconds, truncated. At least
// MinTTL (10ms), and MinLeaseTTL (100ms) with WithAutoExtend: a TTL the
// library cannot keep is rejected, not lost at once.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithTries limits LockContext to n attempts. Default 0: no limit, LockContext
// retries until it obtains the lock or its ctx is done. 1 makes LockContext
// behave like TryLockContext. A negative n is rejected.
func WithTries(n int) Option { return func(c *config) { c.tries = n } }

// WithRetryDelay sets the backoff between attempts of LockContext: before
// attempt k+1 a uniformly random sleep in [0, min(max, min*2^k)] ("full
// jitter"), cut short when ctx is done. Defaults 4ms and 256ms; 0 < min <= max.
// A call that finds the lock held waits instead to be woken by its release;
// max then bounds how long a lost wake-up delays it (docs/design.md, "Waiting").
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) { c.retryDelayMin, c.retryDelayMax = min, max }
}

// WithAutoExtend keeps each acquisition alive until UnlockContext, extending
// it as ExtendContext does every extend interval (default TTL/3). If the token
// is gone from a majority, Lost closes at once; if renewals keep failing for
// want of nodes, at Until minus TTL/10, before another owner can get in. No
// renewal reaches a node after UnlockContext's release. Off by default. The
// TTL must be at least MinLeaseTTL.
func WithAutoExtend() Option { return func(c *config) { c.autoExtend = true } }

// WithExtendInterval sets the time between the starts of two automatic
// extensions. Default 0: TTL/3. Otherwise it must be within [TTL/100, TTL/2]
// and, with the set's drift factor, leave a renewal 50ms to be answered before
// the validity's end minus TTL/10. Without WithAutoExtend it has no effect
// (its range is still checked).
func WithExtendInterval(d time.Duration) Option { return func(c *config) { c.extendInterval = d } }

// WithMaxExtends limits the automatic extensions of one acquisition to n, as
// the Redlock description suggests, so a hung holder cannot keep the lock for
// ever: it then runs out with its validity, Lost closing shortly before.
// Default 0: no limit; a negative n is rejected.
func WithMaxExtends(n int) Option { return func(c *config) { c.maxExtends = n } }

// WithFencing gives every acquisition a fencing number (Mutex.FencingToken),
// at the cost of one more round trip. Numbers are strictly increasing per
// name across holders; on Cluster nodes each hash slot has its own counter,
// so numbers are ordered per slot, not across slots. Off by default.
func WithFencing() Option { return func(c *config) { c.fencing = true } }

// MaxMetadataLen is the longest metadata WithMetadata accepts, in bytes:
// every node stores it beside the lock key, and Inspect reads it back.
const MaxMetadataLen = 1024

// WithMetadata stores metadata with each acquisition of a Mutex (from
// NewMutex; not a Semaphore, RWMutex or multi-name lock): written with the
// lock key on each node in the same script call, kept, extended and put
// back (by a renewal) with the key, deleted with it on UnlockContext, and
// returned by redlock's Inspect when a majority holds it. At most
// MaxMetadataLen bytes of valid UTF-8; else every call returns ErrInvalid,
// sending nothing.
func WithMetadata(metadata string) Option { return func(c *config) { c.metadata = &metadata } }

// check returns what is wrong with the Mutex's configuration for t on set,
// as an error matching ErrInvalid, or nil.
func (m *Mutex) check(set *engine.Set, t target) error {
	c := m.cfg
	who := cmp.Or(t.observed, m.name) // a permit's semaphore, a read-write lock
	if set == nil || len(set.Nodes) == 0 || set.Clock == nil {
		return invalid("mutex: %q has no node set; create Mutexes with redlock.New(...).NewMutex", who)
	}
	names := t.names
	if names == nil {
		names = []string{t.name}
	}
	for _, name := range names {
		switch {
		case name == "":
			return invalid("mutex: empty lock name")
		case len(set.Keys.Prefix)+len(name) > MaxNameLen:
			return invalid("mutex: lock name of %d bytes (with key prefix) is longer than %d", len(set.Keys.Prefix)+len(name), MaxNameLen)
		case !t.reserved && set.Keys.Reserved(name):
			return invalid("mutex: %q: the key is reserved for the library's own bookkeeping; choose another name", name)
		}
	}
	switch {
	case c.ttl < time.Millisecond:
		return invalid("mutex: %q: TTL %v is under 1ms, the granularity of Redis expiry", who, c.ttl)
	case c.autoExtend && c.ttl.Truncate(time.Millisecond) < MinLeaseTTL:
		return invalid("mutex: %q: TTL %v is below the smallest TTL a lease can be renewed within, %v: a renewal due at TTL/3 must be able to wait %v for its answers before the loss deadline, the validity's end minus TTL/10",
			who, c.ttl, MinLeaseTTL, renewalWindow)
	case c.ttl.Truncate(time.Millisecond) < MinTTL:
		return invalid("mutex: %q: TTL %v is below the smallest TTL a lock can be kept for, %v: the drift allowance of %v and a round trip would leave it almost no validity",
			who, c.ttl, MinTTL, timing.DriftAllowance(c.ttl, set.DriftFactor))
	case set.Quarantine > 0 && c.ttl > set.Quarantine && !t.reading:
		return invalid("mutex: %q: TTL %v is longer than the restart quarantine, %v: a node that lost its data would count again while a lock it forgot is valid; give WithRestartQuarantine at least the largest TTL",
			who, c.ttl, set.Quarantine)
	case c.tries < 0:
		return invalid("mutex: %q: negative number of tries %d (0 means no limit)", who, c.tries)
	case c.retryDelayMin <= 0 || c.retryDelayMax < c.retryDelayMin:
		return invalid("mutex: %q: retry delays [%v, %v] must satisfy 0 < min <= max", who, c.retryDelayMin, c.retryDelayMax)
	case c.extendInterval < 0 || c.extendInterval > c.ttl/2 || (c.extendInterval > 0 && c.extendInterval < c.ttl/100):
		return invalid("mutex: %q: extend interval %v must be 0 (a third of the TTL) or between TTL/100 and TTL/2 (TTL %v)", who, c.extendInterval, c.ttl)
	case c.autoExtend && renewalTooLate(c, set.DriftFactor):
		return invalid("mutex: %q: with a %v TTL, the first renewal (every %v) could not wait %v for its answers before the loss deadline, the validity's end minus TTL/10; shorten the extend interval or lengthen the TTL",
			who, c.ttl, intervalOf(c), renewalWindow)
	case c.maxExtends < 0:
		return invalid("mutex: %q: negative number of extensions %d (0 means no limit)", who, c.maxExtends)
	case c.metadata == nil:
	case t.kind != nil:
		return invalid("mutex: %q: WithMetadata applies to a Mutex from NewMutex only, not a Semaphore, RWMutex or multi-name lock", who)
	default:
		return checkMetadata(who, *c.metadata)
	}
	return nil
}

// intervalOf is the extend interval of c: WithExtendInterval, or TTL/3.
func intervalOf(c config) time.Duration {
	if c.extendInterval > 0 {
		return c.extendInterval
	}
	return c.ttl / 3
}

// renewalTooLate reports whether, at zero elapsed time, the first automatic
// renewal could not wait renewalWindow for its answers before the loss
// deadline (validity end minus TTL/10).
func renewalTooLate(c config, driftFactor float64) bool {
	return intervalOf(c)+renewalWindow > timing.Validity(c.ttl, 0, driftFactor)-c.ttl/10
}
