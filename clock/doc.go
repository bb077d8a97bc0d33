// Package clock is quorumlock's time source and the arithmetic of a lock's
// validity time.
//
// Every duration the library measures (how long an acquisition took, how much
// validity is left, how long to sleep before the next attempt) goes through a
// [Clock], so tests can drive time with [Fake] instead of sleeping. [Real] is
// the default and reads Go's monotonic clock, so a step of the wall clock (NTP,
// an operator's date command) never makes a lock look more or less valid.
//
// [Validity] and [DriftAllowance] implement the formula of the Redlock
// algorithm as published by Redis:
//
//	drift    = ttl*driftFactor + 2ms
//	validity = ttl - elapsed - drift
//
// A lock counts as obtained only while validity > 0. Context deadlines are
// outside this package's reach: they always run on real time.
package clock
