// Package clock is quorumlock's time source.
//
// Every duration the library measures (how long an acquisition took, how much
// validity is left, how long to sleep before the next attempt) goes through a
// [Clock], so tests can drive time with [Fake] instead of sleeping. [Real] is
// the default and reads Go's monotonic clock, so a step of the wall clock (NTP,
// an operator's date command) never makes a lock look more or less valid.
// Context deadlines are outside this package's reach: they always run on real
// time.
package clock
