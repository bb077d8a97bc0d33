// Package round puts one question to N voters in parallel and decides, as
// early as the votes allow, whether a majority said yes, by the rules of
// [quorum.Tally]. It knows nothing about Redis: a voter answers with a
// [quorum.Vote]. A voter without an answer within its timeout (from
// [Round.Sent]) or by the round's deadline counts as Failed with
// [ErrDeadline] ([ErrNotSent] if it was never asked).
package round
