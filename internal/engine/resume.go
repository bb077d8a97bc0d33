package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// Lag returns how long the round that set h's validity took to be decided:
// the validity it gave is TTL minus the lag minus the drift allowance,
// counted from the round's start, and the keys it set on the nodes expire
// at most the lag after the round's start plus the TTL.
func (h *Hold) Lag() time.Duration {
	l := h.lock
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.until.IsZero() {
		return 0
	}
	return max(h.renewedAt.Add(l.spec.TTL-l.drift).Sub(h.until), 0)
}

// Resume makes l hold the acquisition whose token another Contender holds, with
// its fencing number, once a majority of the nodes shows the key holding
// the token (one read per node; nothing written). lag and drift are the
// other Contender's Hold.Lag and drift allowance: the validity never ends later
// than the other Contender's (docs/design.md, "Handles"). l must hold nothing
// and be unused by any other goroutine.
//
// Errors: NotHeld when fewer than a majority can still hold the token or
// no validity is left; NodesUnavailable when too few nodes answered;
// Closed when the set is closed; ctx's error, joined, when ctx ended first.
func (l *Contender) Resume(ctx context.Context, token string, fence uint64, lag, drift time.Duration) error {
	s := l.set
	if err := s.ErrIfClosed("mutex: resume %q: the node set was closed; nothing sent", l.spec.Name); err != nil {
		return err
	}
	start := s.Clock.Now()
	read := send(s, l.timeout(), skipStalled, nil, node.PeekScript, newKeyset(l.key), nil,
		func(_ int, r node.Result) (quorum.Vote, time.Duration, error) {
			if r.Err != nil {
				return quorum.Failed, 0, r.Err
			}
			p, err := node.ParsePeek(r.Reply)
			switch {
			case err != nil:
				return quorum.Failed, 0, err
			case p.Type == "string" && p.Value == token && p.TTL > 0:
				return quorum.Yes, p.TTL, nil
			}
			return quorum.No, 0, nil
		})
	deadline, stop := armed(s, l.timeout())
	derr := read.round.Decide(ctx, deadline)
	stop()
	t := read.round.Tally()
	elapsed := s.Clock.Since(start)
	var ttls []time.Duration
	var holders uint64
	for _, rep := range read.round.Replies() {
		if rep.Vote == quorum.Yes {
			ttls = append(ttls, rep.Value)
			holders |= 1 << rep.Node
		}
	}
	nodes := nodeErrors(s, read.round)
	switch {
	case t.Won():
	case t.Lost() && !t.Unavailable():
		return &OpError{msg: fmt.Sprintf("mutex: resume %q: lock not held: %d nodes hold the handle's token, fewer than a majority; it was released, expired or passed to another owner (%v)",
			l.spec.Name, t.Yes, t), is: []error{s.Errors.NotHeld}, nodes: nodes}
	case !t.Decided():
		return WithCtx(&OpError{msg: fmt.Sprintf("mutex: resume %q interrupted before a majority answered (%v)", l.spec.Name, t), nodes: nodes}, derr)
	default:
		return &OpError{msg: fmt.Sprintf("mutex: resume %q: too few nodes answered to confirm the handle's token (%v)", l.spec.Name, t),
			is: []error{s.Errors.NodesUnavailable}, nodes: nodes}
	}
	// The need-th longest remaining TTL: until then a majority holds the
	// key. Read after start, it ends no sooner than start plus shortest, no
	// later than the read's end plus shortest plus 1ms (PTTL's rounding):
	// the resumed lag, lag + elapsed + 1ms, keeps Lag's meaning for a
	// handle of the resumed Contender.
	slices.Sort(ttls)
	shortest := ttls[len(ttls)-t.Need]
	lagged := lag + elapsed + time.Millisecond
	drift = max(drift, l.drift)
	until := start.Add(shortest + elapsed + time.Millisecond - drift - 2*lagged)
	if !until.After(s.Clock.Now()) {
		return &OpError{msg: fmt.Sprintf("mutex: resume %q: the token's remaining TTL on a majority, %v, leaves no validity after the read's %v, the drift allowance %v and the original's lag %v; treat the lock as lost",
			l.spec.Name, shortest, elapsed, drift, lag), is: []error{s.Errors.NotHeld}, nodes: nodes}
	}
	h := newHold(l, token, "", start, until, holders, fence)
	h.passes = maxPasses // the handle does not say how much of its fencing block is left: never passed
	// Lag() is lagged, plus what the original's drift allowance exceeds
	// l's by: a handle of h keeps both.
	h.renewedAt = until.Add(-l.spec.TTL + drift + lagged)
	if !l.adopt(h) {
		return s.ErrIfClosed("mutex: resume %q: the node set was closed during the read; nothing held", l.spec.Name)
	}
	return nil
}

// adopt makes h, just won, l's acquisition, renewed if the spec says so; it
// reports false, and does nothing, once the set is closed.
func (l *Contender) adopt(h *Hold) bool {
	if !l.set.track(h) {
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

// Identity names the set for handles: a digest of the key prefix and the
// node addresses (in any order), which another process with the same
// configuration computes alike.
func (s *Set) Identity() string {
	addrs := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		addrs[i] = n.Addr()
	}
	slices.Sort(addrs)
	sum := sha256.Sum256([]byte(s.KeyPrefix + "\x00" + strings.Join(addrs, "\x00")))
	return hex.EncodeToString(sum[:8])
}
