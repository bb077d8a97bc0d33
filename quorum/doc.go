// Package quorum is the arithmetic of a Redlock round: N voters are asked
// one question in parallel, and the round is decided, as early as the votes
// allow, by whether a majority said yes.
//
// It knows nothing about Redis: each voter's answer is a [Vote], [Yes], [No]
// or [Failed], and a [Tally] counts them. The lock in package mutex asks
// every Redis node to take, extend or release a key and reads the outcome
// from such a Tally.
//
// The rules, from the Redlock algorithm:
//   - the majority is N/2+1 of the configured voters, never of those that
//     answered ([Majority]); with an even N a 50/50 split is a loss;
//   - the round is won as soon as Yes >= N/2+1 and lost once
//     Yes + Pending < N/2+1, so it never waits for a straggler whose answer
//     cannot change the outcome;
//   - a voter that fails (error, timeout) is not a No: [Tally.Unavailable]
//     tells whether failures, rather than No votes, made the majority
//     impossible; when the answers so far leave that open (some failed, some
//     said No), the round waits for the pending voters before it is
//     [Tally.Decided], so a fast failure never passes for a lack of nodes
//     while the lock is in fact held elsewhere.
package quorum
