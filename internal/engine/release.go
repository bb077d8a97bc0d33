package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// Release releases h on every node (extra after the release script's
// arguments, for a kind whose script takes more) and reports whether a
// majority confirmed that the lock was still ours until then; the caller
// holds the op slot. It sends even when ctx is done, waits for each node at
// most the per-node timeout after its command left, no longer than ctx, and
// leaves slower nodes to finish in the background (docs/design.md, "Unlock").
// Errors: NodesUnavailable when too few nodes answered, or ctx's error when
// ctx ended before the outcome was known (h stays held: the caller may
// retry); NotHeld when a majority no longer held the token, or the
// acquisition was already found lost. Otherwise h is no longer held.
func (l *Contender) Release(ctx context.Context, h *Hold, extra ...any) error {
	s := l.set
	if len(extra) == 0 && l.pass(h) {
		return nil
	}
	s.renewals().end(h) // no renewal is sent after this point
	l.mu.Lock()
	before, suspect := h.releaseVotes, h.suspect
	l.mu.Unlock()
	args := append(l.releaseArgs(h.token, "release", place{id: h.id}, l.tombstoneBoxed), extra...)
	rel := releaseFanouts.get(s, l.timeout(),
		func(i int, r node.Result) (quorum.Vote, released, error) {
			v, rel, err := parseRelease(i, r)
			if suspect&(1<<i) != 0 && v == quorum.Yes {
				// A renewal may have put the key back after another
				// owner held the lock: deleting it proves nothing.
				return quorum.No, rel, nil
			}
			if before != nil {
				switch before[i] {
				case quorum.Yes:
					return quorum.Yes, rel, nil // confirmed by the first release
				case quorum.No:
					return quorum.No, rel, nil // it told then that the key was not ours
				default:
					if v == quorum.No && rel.status == node.Missing && suspect&(1<<i) == 0 {
						v = quorum.Yes
					}
				}
			}
			return v, rel, err
		})
	defer rel.done()
	rel.dispatch(s, l.timeout(), queueBehindStalled, nil, l.kind.Release, l.releaseKeys, args)
	// Each node's answer is awaited for the per-node timeout from the
	// moment its command left; a command still queued in this process
	// (many releases at once) is back-pressure, waited for while ctx lasts.
	// Once ctx is done, the releases go on without anyone waiting.
	ctxErr := rel.round.Decide(ctx, nil)
	t := rel.round.Tally()
	foundLost := false
	if cause := h.LostCause(); cause != nil && errors.Is(cause, s.Errors.NotHeld) {
		foundLost = true // nothing to retry: the lock was lost
	}
	if !t.Won() && (t.Unavailable() || ctxErr != nil) && !foundLost {
		votes := make([]quorum.Vote, len(s.Nodes))
		for i := range votes {
			votes[i] = rel.round.Vote(i)
			if before != nil && before[i] != quorum.Pending && before[i] != quorum.Failed {
				votes[i] = before[i]
			}
		}
		l.mu.Lock()
		h.releaseVotes = votes
		l.mu.Unlock()
		s.renewals().watchAfterRelease(h)
		if ctxErr != nil {
			return WithCtx(&OpError{
				msg:   fmt.Sprintf("mutex: unlock %q interrupted before a majority confirmed the release, which goes on in the background; retry to confirm it, or the keys expire with their TTL (%v)", l.spec.Name, t),
				nodes: nodeErrors(s, rel.round),
			}, ctxErr)
		}
		return &OpError{
			msg:   fmt.Sprintf("mutex: unlock %q: too few nodes answered to confirm the release; retry, or the keys expire with their TTL (%v)", l.spec.Name, t),
			is:    []error{s.Errors.NodesUnavailable},
			nodes: nodeErrors(s, rel.round),
		}
	}
	l.retire(h)
	s.cohort.released(h)
	if foundLost {
		return &OpError{
			msg: fmt.Sprintf("mutex: unlock %q: lock not held: it was found lost before the release (%v)", l.spec.Name, t),
			is:  []error{s.Errors.NotHeld},
		}
	}
	if t.Won() {
		if s.Notify {
			s.Hub().Released(l.channel, h.token, headOf(rel.round))
		}
		return nil
	}
	err := &OpError{
		msg:   fmt.Sprintf("mutex: unlock %q: lock not held: a majority no longer held this Mutex's token; it expired or passed to another owner (%v)", l.spec.Name, t),
		is:    []error{s.Errors.NotHeld},
		nodes: nodeErrors(s, rel.round),
	}
	h.markLost(l.lostErr(err, "found at unlock"))
	return err
}

// headOf returns the waiter the nodes that released name first in their
// queue (notify.Head).
func headOf(r *round.Round[released]) string {
	var buf [8]string
	heads := buf[:0]
	for _, a := range r.Replies() {
		if a.Vote == quorum.Yes {
			heads = append(heads, a.Value.head)
		}
	}
	return notify.Head(heads)
}

// tombstoneLife is how long a node remembers that a release of ours deleted
// the key, in ms: long enough for a client to re-send the command after a
// lost reply, never longer than the key could have lived.
func (l *Contender) tombstoneLife() int64 { return max(min(l.ttlArg, 2000), 1) }
