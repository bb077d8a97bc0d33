package mutex

import "time"

// Defaults of the per-Mutex options.
const (
	DefaultTTL           = 8 * time.Second
	DefaultRetryDelayMin = 4 * time.Millisecond
	DefaultRetryDelayMax = 256 * time.Millisecond
	// MaxNameLen is the longest lock name (with the set's key prefix) accepted,
	// in bytes. Redis keys can be longer, but a lock name this long is a bug,
	// and every node would store it.
	MaxNameLen = 4096
)

// Option configures one Mutex. Options are applied in order; invalid values are
// not clamped but reported by every method of the Mutex as an error matching
// ErrInvalid.
type Option func(*config)

type config struct {
	ttl           time.Duration
	tries         int
	retryDelayMin time.Duration
	retryDelayMax time.Duration
}

func defaultConfig() config {
	return config{
		ttl:           DefaultTTL,
		retryDelayMin: DefaultRetryDelayMin,
		retryDelayMax: DefaultRetryDelayMax,
	}
}

// WithTTL sets the lock's time to live on each node, the "PX" of
// SET key token NX PX ttl. Default 8s. The TTL is sent in whole milliseconds
// (shorter parts are dropped, never rounded up); it must leave a positive
// validity after the drift allowance (ttl*driftFactor + 2ms), so with the
// default drift factor anything under 3ms is rejected.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithTries limits LockContext to n attempts. Default 0: no limit, LockContext
// retries until it obtains the lock or its ctx is done. 1 makes LockContext
// behave like TryLockContext. A negative n is rejected.
func WithTries(n int) Option { return func(c *config) { c.tries = n } }

// WithRetryDelay sets the bounds of the backoff between two attempts of
// LockContext: before attempt k+1 it sleeps a uniformly random time in
// [0, min(max, min*2^k)] ("full jitter"), cut short when ctx is done. Defaults
// 4ms and 256ms. Both must be > 0 and min <= max.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) { c.retryDelayMin, c.retryDelayMax = min, max }
}
