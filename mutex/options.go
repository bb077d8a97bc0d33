package mutex

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/timing"
)

// MaxNameLen is the longest lock name (with the set's key prefix) accepted, in
// bytes. Redis keys can be longer, but a lock name this long is a bug, and
// every node would store it.
const MaxNameLen = 4096

// Defaults of the retry delays (WithRetryDelay); the default TTL is
// timing.DefaultTTL.
const (
	defaultRetryDelayMin = 4 * time.Millisecond
	defaultRetryDelayMax = 256 * time.Millisecond
)

// Option configures one Mutex. Options are applied in order; invalid values are
// not clamped but reported by every method of the Mutex as an error matching
// ErrInvalid.
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

// WithTTL sets the lock's time to live on each node, the "PX" of
// SET key token NX PX ttl. Default 8s. The TTL is sent in whole milliseconds
// (shorter parts are dropped, never rounded up); it must leave a positive
// validity after the drift allowance (ttl*driftFactor + 2ms), so with the
// default drift factor of 0.01 anything under 3ms is rejected.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithTries limits LockContext to n attempts. Default 0: no limit, LockContext
// retries until it obtains the lock or its ctx is done. 1 makes LockContext
// behave like TryLockContext. A negative n is rejected.
func WithTries(n int) Option { return func(c *config) { c.tries = n } }

// WithRetryDelay sets the bounds of the backoff between two attempts of
// LockContext: before attempt k+1 it sleeps a uniformly random time in
// [0, min(max, min*2^k)] ("full jitter"), cut short when ctx is done. Defaults
// 4ms and 256ms. Both must be > 0 and min <= max.
//
// With release notifications (the default), a call that finds the lock held
// waits instead to be woken by the release, at the latest when the holder's
// key expires, with a random time in [max/2, max] as the fallback for a lost
// message; a call that starts while others of the same Redlock wait queues
// behind them the same way, and is woken at once if the one ahead gives up.
// So max also bounds how long a lost message can delay a waiter.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) { c.retryDelayMin, c.retryDelayMax = min, max }
}

// WithAutoExtend keeps every acquisition of the Mutex alive in the background
// until UnlockContext: a goroutine of the Mutex extends the lock (a
// token-checked extension that needs a majority and leaves a positive
// validity, as ExtendContext) every extend interval, by default a third of the
// TTL, counted from the start of the previous successful round. A renewal
// that finds the token gone on a majority closes Lost at once; renewals that
// fail for want of nodes are retried, sooner each time, and if none succeeds
// Lost is closed at Until minus TTL/10, before another owner can get in.
// UnlockContext stops the goroutine and waits for a renewal in flight before
// it releases anything. Off by default.
func WithAutoExtend() Option { return func(c *config) { c.autoExtend = true } }

// WithExtendInterval sets the time between the starts of two automatic
// extensions (WithAutoExtend). Default 0: a third of the TTL. Otherwise it
// must be between TTL/100 and TTL/2, so a failed renewal leaves time to retry
// before the validity ends, and, with the set's drift factor, come before the
// validity's end minus TTL/10.
func WithExtendInterval(d time.Duration) Option { return func(c *config) { c.extendInterval = d } }

// WithMaxExtends limits the automatic extensions of one acquisition to n, as
// the Redlock description suggests, so a holder that hangs cannot keep the
// lock for ever: after the n-th, the lock runs out with its validity, and
// Lost is closed shortly before. Default 0: no limit. A negative n is
// rejected.
func WithMaxExtends(n int) Option { return func(c *config) { c.maxExtends = n } }

// WithFencing makes every acquisition draw a fencing number (see
// Mutex.FencingToken): strictly increasing across successive holders, for a
// protected resource to refuse writes from a holder that lost the lock. It
// costs one more round trip per acquisition, and needs the lock key and the
// set's counter key on the same node (so not a Cluster client). Off by
// default.
func WithFencing() Option { return func(c *config) { c.fencing = true } }
