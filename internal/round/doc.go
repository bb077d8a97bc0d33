// Package round puts one question to N voters in parallel and decides, as
// early as the votes allow, whether a majority said yes, by the rules of
// [quorum.Tally]. It knows nothing about Redis: a voter answers with a
// [quorum.Vote].
package round
