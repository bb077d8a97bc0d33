package engine

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// Extend resets h's TTL on the nodes where its key still holds its token
// (the Redlock spec's extension: a token-checked PEXPIRE, never recreating a
// key) and moves Until. The caller holds the op slot. It waits at most the
// per-node timeout, decides as soon as the outcome is known, and returns
// early, with ctx's error joined, if ctx ends.
//
// Errors: NotHeld when fewer than a majority can still hold the token
// (counting only the nodes that granted it and did not say otherwise; Lost
// closes), or when no validity is left; NodesUnavailable when too few nodes
// answered to tell, Until unchanged.
func (l *Contender) Extend(ctx context.Context, h *Hold) error {
	s := l.set
	clk := s.Clock
	args := l.appendRenewArgs(nil, h.token, "0")
	start := clk.Now()
	ext := send(s, l.timeout(), skipStalled, nil, quorum.No, l.kind.Renew, l.renewKeys, args, parseRenewal)
	deadline, stop := armed(s, max(l.budget(start), 0))
	derr := ext.round.Decide(ctx, deadline)
	stop()
	t := ext.round.Tally()
	var e extension
	for i := range s.Nodes {
		if ext.round.Vote(i) == quorum.Pending {
			e.add(i, quorum.Pending, 0)
		}
	}
	for _, rep := range ext.round.Replies() {
		e.add(rep.Node, rep.Vote, rep.Value)
	}
	won, lost := h.judge(e, s.Need())
	nodes := nodeErrors(s, ext.round)
	switch elapsed := clk.Since(start); {
	case won:
		if v := timing.Validity(l.spec.TTL, elapsed, s.DriftFactor); v > 0 {
			h.extended(start, start.Add(v), e, 0)
			s.renewals().rescheduled(h)
			return nil
		}
		err := &OpError{
			msg:   fmt.Sprintf("mutex: extend %q: a majority answered after %v, which leaves no validity of the %v TTL; treat the lock as lost (%v)", l.spec.Name, elapsed, l.spec.TTL, t),
			is:    []error{s.Errors.NotHeld},
			nodes: nodes,
		}
		h.foundLost(l.lostErr(err, ""))
		return err
	case !t.Decided() && !lost:
		return WithCtx(&OpError{msg: fmt.Sprintf("mutex: extend %q interrupted before a majority answered (%v)", l.spec.Name, t), nodes: nodes}, derr)
	case lost:
		err := &OpError{
			msg:   fmt.Sprintf("mutex: extend %q: lock not held: only %d nodes can still hold this Mutex's token, fewer than a majority; it expired or passed to another owner (%v)", l.spec.Name, h.possible(e), t),
			is:    []error{s.Errors.NotHeld},
			nodes: nodes,
		}
		h.foundLost(l.lostErr(err, ""))
		return err
	}
	h.forget(e, 0)
	return &OpError{
		msg:   fmt.Sprintf("mutex: extend %q: too few nodes answered to extend the lock (%v)", l.spec.Name, t),
		is:    []error{s.Errors.NodesUnavailable},
		nodes: nodes,
	}
}

// parseRenewal reads a node's answer to the renew script for one key.
func parseRenewal(_ int, r node.Result) (quorum.Vote, node.Renewal, error) {
	if r.Err != nil {
		return quorum.Failed, 0, r.Err
	}
	codes, errs, err := node.ParseRenew(r.Reply, 1)
	switch {
	case err != nil:
		return quorum.Failed, 0, err
	case errs != nil:
		return quorum.Failed, 0, errs[0]
	case codes[0] == node.Extended:
		return quorum.Yes, codes[0], nil
	}
	return quorum.No, codes[0], nil
}

// extension is what one extension of an acquisition found, node by node
// (bit i for node i).
type extension struct {
	yes      uint64 // the key held the token and was extended
	restored uint64 // the key was missing and the token was put back
	gone     uint64 // the key was missing, or held by another token
	unknown  uint64 // no answer: failed, or still pending
	failed   uint64 // of those, the nodes that failed
}

func (e *extension) add(i int, v quorum.Vote, r node.Renewal) {
	bit := uint64(1) << i
	switch {
	case v == quorum.Yes:
		e.yes |= bit
	case v == quorum.No && r == node.Restored:
		e.restored |= bit
	case v == quorum.No:
		e.gone |= bit
	case v == quorum.Failed:
		e.unknown |= bit
		e.failed |= bit
	default:
		e.unknown |= bit
	}
}

// A node's answer that the key holds our token counts only if it is not
// suspect: a renewal may have put the token back there (renew.lua restores
// a missing key on nodes that are not holders) without a majority of
// trusted answers in the same round, so the key may have been missing, and
// another owner may have held the lock meanwhile, before it came back. A
// round that wins clears the suspicion of the nodes that answered in it:
// their key was ours within a validity that round proved.

// possible returns how many nodes may still hold the token: those whose
// answer that they do counts, the holders that did not answer, and the
// nodes not yet heard from whose answer would count.
func (h *Hold) possible(e extension) int {
	holders, suspect := h.trust()
	pending := e.unknown &^ e.failed
	return bits.OnesCount64(e.yes&^suspect | e.unknown&holders | pending&^suspect)
}

// judge says whether the extension e won (a majority of trusted nodes
// extended the token), or showed the acquisition lost (fewer than a
// majority may still hold it); neither means too few nodes answered.
func (h *Hold) judge(e extension, need int) (won, lost bool) {
	_, suspect := h.trust()
	return bits.OnesCount64(e.yes&^suspect) >= need, h.possible(e) < need
}

func (h *Hold) holdersNow() uint64 {
	holders, _ := h.trust()
	return holders
}

func (h *Hold) trust() (holders, suspect uint64) {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	return h.holders, h.suspect
}

// extended records a won extension that started at start: the validity
// moves to until (never back); the nodes that extended or got back the
// token are the holders, and trusted; the nodes sent a restore that did not
// answer are suspect. A holder that did not answer is one no longer: the
// next renewal asks it to restore a missing key, and waits for its answer.
func (h *Hold) extended(start, until time.Time, e extension, restoreTo uint64) {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	if until.After(h.until) && !h.until.IsZero() {
		h.until, h.renewedAt = until, start
	}
	h.holders = e.yes | e.restored
	h.suspect = h.suspect&^h.holders | restoreTo&e.unknown
}

// forget records an extension that did not decide: the nodes found
// without the token no longer hold it, and those sent a restore that put
// the token back or did not answer are suspect.
func (h *Hold) forget(e extension, restoreTo uint64) {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	h.holders &^= e.gone
	h.suspect |= restoreTo & (e.restored | e.unknown)
}
