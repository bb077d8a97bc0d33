package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// Release passes h in-process or releases it on every node (extra: more
// script arguments), as design.md's "Unlock" says; the caller holds the op
// slot. It sends even when ctx is done and waits at most the per-node
// timeout and ctx. Errors: NodesUnavailable, or ctx's (h stays held, for a
// retry, until a majority confirms: confirmLater; Done closes); NotHeld when a majority
// no longer held the token, or h was found lost (unless a majority confirmed
// extra's writes); h is then no longer held.
func (l *Contender) Release(ctx context.Context, h *Hold, extra ...any) error {
	s := l.set
	if len(extra) == 0 && l.pass(h) {
		return nil
	}
	s.renewals().end(h) // no renewal is sent after this point
	l.mu.Lock()
	before, suspect, holders, absent, tomb := h.releaseVotes, h.suspect, h.holders, h.absent, l.tombstone(h)
	l.mu.Unlock()
	args := append(l.releaseArgs(h.token, modeRelease, place{id: h.id}, tomb), extra...)
	rel := newFanout(&releaseFanouts, s, l.timeout(),
		func(i int, r node.Result) (quorum.Vote, released, error) {
			if r.Err != nil { // its answer was lost: the release may not have run there (a cold script cache), so send it again
				s.Nodes[i].Later(l.kind.Release, l.releaseKeys.names, l.releaseKeys.args, args)
			}
			v, rel, err := parseRelease(i, r)
			// Suspect nodes, and a retry's rule (for nodes that granted the lock): design.md, "Unlock".
			switch {
			case suspect&(1<<i) != 0 && v == quorum.Yes:
				return quorum.No, rel, nil
			case absent&(1<<i) != 0 && v == quorum.Failed: // it never had the token: it cannot confirm, nor could it on a retry
				if r.Err != nil {
					err = r.Err // still reported as the node's failure
				}
				return quorum.No, rel, err
			case before == nil:
			case before[i] == quorum.Yes || before[i] == quorum.No:
				return before[i], rel, nil
			case rel.status == node.TakenSince && suspect&(1<<i) == 0: // the first release ran late, then another owner came
				v = quorum.Yes
			case v == quorum.No && rel.status == node.Missing && suspect&(1<<i) == 0 && holders&(1<<i) != 0:
				v = quorum.Yes
			}
			return v, rel, err
		})
	defer rel.done()
	rel.dispatch(queueBehindStalled, nil, l.kind.Release, l.releaseKeys, args)
	ctxErr := rel.round.Decide(ctx, nil)
	t := rel.round.Tally()
	for i := range s.Nodes {
		if absent&(1<<i) != 0 && rel.round.Vote(i) == quorum.Failed { // timed out, but it never had the token either
			t.Failed, t.No = t.Failed-1, t.No+1
		}
	}
	foundLost := errors.Is(h.LostCause(), s.Errors.NotHeld) // nothing to retry
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
		h.finish() // the release may land at any moment: its holder's work ends now
		if ctxErr != nil {
			err := WithCtx(&OpError{msg: fmt.Sprintf("mutex: unlock %q interrupted before a majority confirmed the release, which goes on in the background; retry to confirm it, or the keys expire with their TTL (%v)", l.spec.Name, t),
				nodes: nodeErrors(s, rel.round)}, ctxErr)
			rel.refs.Add(1) // confirmLater reads the round from now on
			go l.confirmLater(rel, h)
			return err
		}
		return &OpError{msg: fmt.Sprintf("mutex: unlock %q: too few nodes answered to confirm the release; retry, or the keys expire with their TTL (%v)", l.spec.Name, t),
			is: []error{s.Errors.NodesUnavailable}, nodes: nodeErrors(s, rel.round)}
	}
	l.retire(h)
	s.cohort.released(h)
	if foundLost && (len(extra) == 0 || !t.Won()) { // extra's writes (a record) confirmed by a majority stand
		return &OpError{msg: fmt.Sprintf("mutex: unlock %q: lock not held: it was found lost before the release (%v)", l.spec.Name, t), is: []error{s.Errors.NotHeld}}
	}
	if t.Won() {
		l.notifyReleased(h, rel.round)
		return nil
	}
	err := &OpError{msg: fmt.Sprintf("mutex: unlock %q: lock not held: a majority no longer held this Mutex's token; it expired, passed to another owner, was forced open (ForceUnlock), or was lost with a node's data (a restart without persistence, a flush) (%v)", l.spec.Name, t),
		is: []error{s.Errors.NotHeld}, nodes: nodeErrors(s, rel.round)}
	h.markLost(l.lostErr(err, "found at unlock"))
	return err
}

// confirmLater follows a release ctx cut short: once a majority confirms,
// h ends as a confirmed Release ends it; else it stays watched.
func (l *Contender) confirmLater(rel *fanout[released], h *Hold) {
	defer rel.done()
	if rel.round.Decide(context.Background(), nil) != nil || !rel.round.Tally().Won() {
		return
	}
	// Ended under the renewer's lock with the retire: no retry reschedules h between.
	r := l.set.renewals()
	r.mu.Lock()
	h.ended.Store(true)
	r.removeLocked(h)
	retired := l.retire(h)
	r.mu.Unlock()
	if retired {
		l.set.cohort.released(h)
		l.notifyReleased(h, rel.round)
	}
}

// notifyReleased tells this process's waiters that h's release was confirmed.
func (l *Contender) notifyReleased(h *Hold, r *round.Round[released]) {
	if l.set.Notify {
		l.set.Hub().Released(l.channel, h.token, headOf(r))
	}
}

// headOf returns the next waiter the releasing nodes name (notify.Head).
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

// releaseAll releases with args on the nodes want selects (nil: all),
// waiting for every answer within the per-node timeout, ctx and Close; a
// lost answer's release is sent again, as Release's.
func (l *Contender) releaseAll(ctx context.Context, want func(i int) bool, args []any) {
	rel := send(l.set, l.timeout(), queueBehindStalled, want, l.kind.Release, l.releaseKeys, args, func(i int, r node.Result) (quorum.Vote, released, error) {
		if r.Err != nil {
			l.set.Nodes[i].Later(l.kind.Release, l.releaseKeys.names, l.releaseKeys.args, args)
		}
		return parseRelease(i, r)
	})
	rel.round.StopOn(l.set.Closing()) // Close waits for the nodes' queues instead
	deadline, stop := timing.Timer(l.set.Clock, l.timeout())
	defer stop()
	_ = rel.round.Collect(ctx, deadline)
}

// releaseAndForget releases with args on every node, answers unread.
func (l *Contender) releaseAndForget(args []any) {
	for _, n := range l.set.Nodes {
		n.Forget(l.kind.Release, l.releaseKeys.names, l.releaseKeys.args, args, nil)
	}
}

// released is one node's answer to a release.
type released struct {
	status node.Release
	head   string
}

// parseRelease votes Yes when the key was ours and is gone.
func parseRelease(_ int, r node.Result) (quorum.Vote, released, error) {
	status, head, err := node.ParseRelease(r.Reply)
	return vote(status == node.Released || status == node.Tombstone, err), released{status, head}, err
}
