// Package timing is the arithmetic of a lock's validity time and of the
// per-node timeout ([NodeTimeout]), the defaults they start from
// ([DefaultTTL], [DefaultDriftFactor]), and the waits the library makes on a
// [clock.Clock].
//
// [Validity] and [DriftAllowance] implement the formula of the Redlock
// algorithm as published by Redis:
//
//	drift    = ttl*driftFactor + 2ms
//	validity = ttl - elapsed - drift
//
// A lock counts as obtained only while validity > 0. [Sleep] waits on a
// Clock, so tests drive it with a [clock.Fake]. Context deadlines are outside
// this package's reach: they always run on real time.
package timing
