package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// Lag returns how long the round that set h's validity took to be decided.
func (h *Hold) Lag() time.Duration {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	if h.until.IsZero() {
		return 0
	}
	return h.lag
}

// Resume makes idle l hold token's acquisition with its fencing number once
// a majority shows the key holding it (one read per node); lag and drift
// are the original's, whose validity it never outlasts ("Handles"). Errors:
// NotHeld, NodesUnavailable, Closed, or ctx's, joined.
func (l *Contender) Resume(ctx context.Context, token string, fence uint64, lag, drift time.Duration) error {
	s := l.set
	if err := s.ErrIfClosed("mutex: resume %q: the node set was closed; nothing sent", l.spec.Name); err != nil {
		return err
	}
	start := s.Clock.Now()
	read := send(s, l.timeout(), skipStalled, nil, node.PeekScript, newKeyset(l.key), nil,
		func(_ int, r node.Result) (quorum.Vote, time.Duration, error) {
			p, err := node.ParsePeek(r.Reply)
			return vote(p.Type == "string" && p.Value == token && p.TTL > 0, err), p.TTL, err
		})
	derr := read.round.Decide(ctx, nil) // each read within its per-node timeout from its departure
	t := read.round.Tally()
	elapsed := s.Clock.Since(start)
	nodes := nodeErrors(s, read.round)
	if !t.Won() {
		return l.failed("resume", t, derr, nodes, fmt.Sprintf("at most %d of %d nodes may still hold the handle's token, fewer than a majority; it was released, expired, passed to another owner, forced open (ForceUnlock), or lost with a node's data", t.N-t.No, t.N),
			" to confirm the handle's token")
	}
	var ttls []time.Duration
	var holders uint64
	for _, rep := range read.round.Replies() {
		if rep.Vote == quorum.Yes {
			ttls = append(ttls, rep.Value)
			holders |= 1 << rep.Node
		}
	}
	slices.Sort(ttls)
	shortest := ttls[len(ttls)-t.Need]
	lagged := lag + elapsed + time.Millisecond
	drift = max(drift, l.drift)
	until := start.Add(shortest + elapsed + time.Millisecond - drift - 2*lagged)
	if until.Sub(s.Clock.Now()) <= l.lossMargin() { // a lease is declared lost from there ("Leases")
		return &OpError{msg: fmt.Sprintf("mutex: resume %q: the token's remaining TTL on a majority, %v, leaves no validity past the loss deadline (TTL/10 before its end) after the read's %v, the drift allowance %v and the original's lag %v; treat the lock as lost",
			l.spec.Name, shortest, elapsed, drift, lag), is: []error{s.Errors.NotHeld}, nodes: nodes}
	}
	// Lag() also keeps what the original's drift allowance exceeds l's by.
	h := newHold(l, token, "", start, lagged+drift-l.drift, until, holders, fence)
	h.passes = maxPasses                                  // the handle does not say how much of its fencing block is left: never passed
	h.mark = node.NewToken()                              // its tombstones are its own, not the original's
	h.renewedAt = until.Add(-l.spec.TTL + drift + lagged) // as if its round began then: renewed from there
	if !l.adopt(h) {
		return s.ErrIfClosed("mutex: resume %q: the node set was closed during the read; nothing held", l.spec.Name)
	}
	return nil
}

// adopt makes h, just won, l's acquisition; false, nothing done, once closed.
func (l *Contender) adopt(h *Hold) bool {
	if !l.set.track(h, nil) {
		return false
	}
	h.granted = l.set.Clock.Now() // passes are timed from here (pass.go)
	l.receive(h)
	l.set.cohort.holding(h)
	return true
}

// Drift returns the lock's drift allowance.
func (l *Contender) Drift() time.Duration { return l.drift }

// Kind returns the lock's kind.
func (l *Contender) Kind() *Kind { return l.kind }
