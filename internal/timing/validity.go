package timing

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultDriftFactor is the share of the TTL allowed for clock drift between
// the client and the Redis nodes when no other factor is configured: 0.01, the
// value the Redlock description uses.
const DefaultDriftFactor = 0.01

// DefaultTTL is the time to live of a lock without mutex.WithTTL: 8 seconds.
const DefaultTTL = 8 * time.Second

// MinDrift is the fixed part of the drift allowance: 2 milliseconds, for the
// millisecond granularity of Redis expiry. It is added to ttl*driftFactor.
const MinDrift = 2 * time.Millisecond

// CheckDriftFactor returns an error unless 0 <= f < 0.5. A factor of 0.5 or more
// would spend at least half of every TTL on the allowance; NaN and infinities
// are rejected too.
func CheckDriftFactor(f float64) error {
	if math.IsNaN(f) || f < 0 || f >= 0.5 {
		return fmt.Errorf("clock: drift factor %v is outside [0, 0.5)", f)
	}
	return nil
}

// DriftAllowance returns ttl*driftFactor + [MinDrift], the part of the TTL that
// is not counted as validity because the nodes' clocks may run faster than the
// client's. The product saturates instead of overflowing.
func DriftAllowance(ttl time.Duration, driftFactor float64) time.Duration {
	p := float64(ttl) * driftFactor
	if p >= math.MaxInt64-float64(MinDrift) {
		return math.MaxInt64
	}
	return time.Duration(p) + MinDrift
}

// NodeTimeout returns the per-node timeout derived for a lock of the given
// TTL from the nodes' round trips (rtts, reordered), of which need make a
// majority (docs/design.md, "Per-node timeout"): 8 times the round trip of
// the slowest node of the fastest majority, at least TTL/100, within
// [min(200ms, max(TTL/5, 50ms)), 500ms].
func NodeTimeout(ttl time.Duration, rtts []time.Duration, need int) time.Duration {
	d := ttl / 100
	if len(rtts) >= need {
		slices.Sort(rtts)
		d = max(d, 8*rtts[need-1])
	}
	floor := min(200*time.Millisecond, max(ttl/5, 50*time.Millisecond))
	return min(max(d, floor), 500*time.Millisecond)
}

// Validity returns the time a lock acquired with the given TTL stays safe to
// use, counted from the moment the majority was known (the Redlock
// description's validity time):
//
//	validity = ttl - elapsed - (ttl*driftFactor + 2ms)
//
// elapsed is the time the acquisition took, measured on the monotonic clock
// from before the first request was sent until the majority was known; the
// validity thus ends at the start plus ttl - (ttl*driftFactor + 2ms). A
// result <= 0 means the lock must be treated as not obtained, even if a
// majority of nodes granted it.
func Validity(ttl, elapsed time.Duration, driftFactor float64) time.Duration {
	return ttl - elapsed - DriftAllowance(ttl, driftFactor)
}
