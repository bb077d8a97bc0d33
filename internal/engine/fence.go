package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// fence turns a won acquisition into a fencing number, as docs/design.md
// argues:
//
//  1. every node that granted the key incremented the set's counter (the
//     acquire script did); the candidate is the largest of those increments;
//  2. only nodes that still hold the counter count: one that lost its data
//     has none, and its vote for the lock stands but says nothing about
//     earlier numbers. With the restart quarantine on, a node seen
//     restarting does not count either until a number was written back to
//     it. When a majority of the set granted the key and holds the counter,
//     the candidate exceeds every number issued before, because each was
//     written back to a majority and two majorities share a node;
//  3. the number is never below the wall clock in microseconds, which keeps
//     numbers increasing when too few counters can vouch; if the clock is
//     behind any counter seen, the acquisition fails instead;
//  4. the number is written back (raise the counter, never lower it, only
//     while the node still holds our token) to every node that may hold the
//     key, and confirmed by a majority before the lock counts as obtained.
//
// budget is the acquisition's deadline; the write-back also stays within the
// per-node timeout. On failure the caller rolls back.
func (l *Contender) fence(ctx context.Context, token string, a *acquisition, budget <-chan time.Time, start time.Time) (uint64, *OpError) {
	s := l.set
	rd := a.round
	need := rd.Tally().Need
	number, seeded := drawn(rd)
	if seeded < need {
		_ = rd.Collect(ctx, budget) // hear every node before falling back on the clock
		number, seeded = drawn(rd)
	}
	number, ok := fenceRule(s, number, highest(rd), seeded, need)
	if !ok {
		return 0, &OpError{
			msg: fmt.Sprintf("mutex: lock %q not obtained: only %d nodes can vouch for the fencing counter (%d must), and the clock is behind a counter (%v)",
				l.spec.Name, seeded, need, rd.Tally()),
			is:    []error{s.Errors.NotObtained, s.Errors.NodesUnavailable},
			nodes: nodeErrors(s, rd),
		}
	}

	// A lock that may be passed within the process reserves a block: its
	// holders get number to number+maxPasses, and the counter is raised to
	// the block's end, so every later number exceeds them all.
	top := number
	if l.passable() {
		top += maxPasses
	}
	// Every node that may hold our key gets the number, queued behind its
	// acquire if that is still running (the script is token-checked, so it
	// does nothing where the acquire failed); a majority is waited for.
	may := func(i int) bool { return a.sent(i) && rd.Vote(i) != quorum.No }
	commit := send(s, l.timeout(), queueBehindStalled, may, l.kind.fence(),
		l.fenceKeys, []any{token, top}, func(i int, r node.Result) (quorum.Vote, bool, error) {
			if r.Err != nil {
				return quorum.Failed, false, r.Err
			}
			ok, err := node.ParseFlag("fence", r.Reply)
			switch {
			case err != nil:
				return quorum.Failed, false, err
			case ok:
				s.Nodes[i].FenceWritten(l.key)
				return quorum.Yes, true, nil
			}
			return quorum.No, false, nil
		})
	deadline, stop := armed(s, min(l.timeout(), l.budget(start)))
	defer stop()
	_ = commit.round.Decide(ctx, deadline)
	if t := commit.round.Tally(); !t.Won() {
		is := []error{s.Errors.NotObtained}
		if t.Unavailable() {
			is = append(is, s.Errors.NodesUnavailable)
		}
		return 0, &OpError{
			msg:   fmt.Sprintf("mutex: lock %q not obtained: fencing number %d not written back to a majority (%v)", l.spec.Name, top, t),
			is:    is,
			nodes: nodeErrors(s, commit.round),
		}
	}
	return number, nil
}

// drawn returns the largest fencing number drawn by the nodes that granted the
// key, and how many of them hold the counter.
func drawn(rd *round.Round[grant]) (number uint64, seeded int) {
	for _, rep := range rd.Replies() {
		if rep.Vote == quorum.Yes && rep.Value.fence > 0 {
			seeded++
			number = max(number, uint64(rep.Value.fence))
		}
	}
	return number, seeded
}

// highest returns the largest fencing counter any node reported, whether it
// may vouch or not.
func highest(rd *round.Round[grant]) uint64 {
	var top int64
	for _, rep := range rd.Replies() {
		top = max(top, rep.Value.counter)
	}
	return uint64(top)
}

// fenceRule is steps 2 and 3 of fence: candidate, the largest number drawn
// by seeded nodes that hold the counter, when a majority (need) did; else
// the clock in µs, if no counter seen (highest) is ahead of it; else no
// number (false).
func fenceRule(s *Set, candidate, highest uint64, seeded, need int) (uint64, bool) {
	now := uint64(max(s.Clock.Now().UnixMicro(), 1))
	switch {
	case seeded >= need:
		return max(candidate, now), true
	case now > highest:
		return now, true
	}
	return 0, false
}
