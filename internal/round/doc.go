// Package round puts one question to N voters in parallel and decides, as
// early as the votes allow, whether a majority said yes.
//
// It knows nothing about Redis: a voter answers with a [quorum.Vote]. The
// engine asks every Redis node to take, extend or release a key through a
// [Round], and reads the outcome from its [quorum.Tally], whose rules (a
// majority of the configured voters; won or lost as soon as the votes allow;
// a failure is not a No) are documented in package quorum. Each voter may
// have a timeout, counted from when its question left ([Round.Sent]); a
// voter without an answer by then, or by the round's deadline, counts as
// Failed with [ErrDeadline] ([ErrNotSent] if it was never asked).
package round
