package mutex

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// fence turns a won acquisition into a fencing number, as docs/design.md
// argues:
//
//  1. every node that granted the key incremented the set's counter (the
//     acquire script did); the candidate is the largest of those increments;
//  2. only nodes that still hold the counter count: one that lost its data in
//     an empty restart has none, and its vote for the lock stands but says
//     nothing about earlier numbers. With the restart quarantine on, a node
//     seen restarting (even from a snapshot, whose counter may be old) does
//     not count either, until a number has been written back to it. When a majority of the set granted the
//     key and holds the counter, the candidate exceeds every number issued
//     before, because each was written back to a majority and two majorities
//     share a node;
//  3. the number is never below the wall clock in microseconds. That changes
//     nothing to the argument above, and keeps numbers increasing when too
//     few counters can vouch (a new deployment, or nodes that lost their
//     data): numbers then grow by one per acquisition from a clock reading,
//     and stay below a later reading unless locks were taken faster than a
//     million a second or the clock was set back. If the clock is behind any
//     counter seen, trusted or not, the acquisition fails instead;
//  4. the number is written back (raise the counter, never lower it, and only
//     while the node still holds our token) to every node that may hold the
//     key, and confirmed by a majority before the lock counts as obtained.
//
// deadline is the acquisition round's; the write-back has its own, within the
// TTL's budget. On failure fence returns the error, and the caller rolls back.
func (m *Mutex) fence(ctx context.Context, token string, round *quorum.Round[grant], sent sends, deadline <-chan time.Time, start time.Time) (uint64, *opError) {
	need := round.Tally().Need
	number, seeded := drawn(round)
	if seeded < need {
		_ = round.Collect(ctx, deadline) // hear every node before falling back on the clock
		number, seeded = drawn(round)
	}
	now := uint64(max(m.set.Clock.Now().UnixMicro(), 1))
	switch {
	case seeded >= need:
		number = max(number, now)
	case now > highest(round):
		// Numbers follow the clock, and no counter seen (trusted or not) is
		// ahead of it: the clock carries the guarantee.
		number = now
	default:
		return 0, &opError{
			msg: fmt.Sprintf("mutex: lock %q not obtained: only %d of the nodes that granted it can vouch for the fencing counter (a majority of %d must), and the clock (%d µs) is behind a counter (%d); fencing numbers cannot be guaranteed to increase (%v)",
				m.name, seeded, need, now, highest(round), round.Tally()),
			is:    []error{ErrNotObtained, ErrNodesUnavailable},
			nodes: nodeErrors(round, m.addr),
		}
	}

	// Every node that may hold our key gets the number, the ones whose acquire
	// is still running queued behind it (the script is token-checked, so it
	// does nothing where the acquire failed); only a majority is waited for.
	// Seeding more than a majority keeps more counters alive for later.
	granted := make([]bool, len(m.set.Nodes))
	for i := range granted {
		granted[i] = sent.sent(i) && round.Vote(i) != quorum.No
	}
	cmdCtx := detached(ctx)
	commit, _ := fanout(m, granted, false, func(n *node.Node, _ *lane) (quorum.Vote, bool, error) {
		ok, err := n.CommitFence(cmdCtx, m.key, m.set.FenceKey(), token, number)
		if ok {
			n.FenceWritten()
		}
		return boolVote(ok, err)
	})
	clk := m.set.Clock
	timer := clk.NewTimer(min(m.timeout, m.cfg.ttl-m.drift-clk.Since(start)))
	defer timer.Stop()
	_ = commit.Decide(ctx, timer.C())
	if t := commit.Tally(); !t.Won() {
		is := []error{ErrNotObtained}
		if t.Unavailable() {
			is = append(is, ErrNodesUnavailable)
		}
		return 0, &opError{
			msg:   fmt.Sprintf("mutex: lock %q not obtained: the fencing number %d could not be written back to a majority (%v)", m.name, number, t),
			is:    is,
			nodes: nodeErrors(commit, m.addr),
		}
	}
	return number, nil
}

// drawn returns the largest fencing number drawn by the nodes that granted the
// key, and how many of them hold the counter.
func drawn(round *quorum.Round[grant]) (number uint64, seeded int) {
	for _, rep := range round.Replies() {
		if rep.Vote == quorum.Yes && rep.Value.fence > 0 {
			seeded++
			number = max(number, uint64(rep.Value.fence))
		}
	}
	return number, seeded
}

// highest returns the largest fencing counter any node reported, whether it
// may vouch or not.
func highest(round *quorum.Round[grant]) uint64 {
	var top int64
	for _, rep := range round.Replies() {
		top = max(top, rep.Value.counter)
	}
	return uint64(top)
}

// FencingToken returns the fencing number of the acquisition the Mutex holds:
// it strictly increases across successive holders of any lock of the node set
// (so of this name), even when different majorities granted them. A resource
// protected by the lock should remember the largest number it has seen and
// refuse writes that carry a smaller one: that stops a holder that was paused
// past its validity. It is 0 when the Mutex holds nothing or was made without
// WithFencing.
func (m *Mutex) FencingToken() uint64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.held {
		return 0
	}
	return m.fenceNo
}
