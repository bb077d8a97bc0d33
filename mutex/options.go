package mutex

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/timing"
)

// MaxNameLen is the longest lock name accepted, key prefix included, in
// bytes: a longer one is a bug, and every node would store it.
const MaxNameLen = 4096

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
}

func defaultConfig() config {
	return config{
		ttl:           timing.DefaultTTL,
		retryDelayMin: defaultRetryDelayMin,
		retryDelayMax: defaultRetryDelayMax,
	}
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
// the validity's end minus TTL/10.
func WithExtendInterval(d time.Duration) Option { return func(c *config) { c.extendInterval = d } }

// WithMaxExtends limits the automatic extensions of one acquisition to n, as
// the Redlock description suggests, so a hung holder cannot keep the lock for
// ever: it then runs out with its validity, Lost closing shortly before.
// Default 0: no limit; a negative n is rejected.
func WithMaxExtends(n int) Option { return func(c *config) { c.maxExtends = n } }

// WithFencing gives every acquisition a fencing number (Mutex.FencingToken),
// at the cost of one more round trip; the lock key and the set's counter key
// must be on the same node (not a Cluster client). Off by default.
func WithFencing() Option { return func(c *config) { c.fencing = true } }
