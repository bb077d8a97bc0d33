package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// grant is what one node answered to an acquire.
type grant struct {
	holderTTL time.Duration // the other holder's remaining TTL, on a No
	behind    bool          // on a No: the key is free, but other waiters are ahead
	waiting   int           // waiters queued on the node
	fence     int64         // as node.Grant.Fence, 0 if the node may not vouch; -1 when not asked
	counter   int64         // as node.Grant.Counter: the node's counter, trusted or not
	conflict  string        // as node.Grant.Conflict
}

// place is a waiting call's place in the queues of the nodes: the id the
// nodes know it by, its ticket (its rank: smaller goes first) and how long
// an entry lasts without being renewed. The zero place does not queue.
type place struct {
	id     string
	ticket int64
	life   time.Duration
	// id and ticket as script arguments, boxed once per call
	idArg, ticketArg any
}

func newPlace(id string, ticket int64, life time.Duration) place {
	return place{id: id, ticket: ticket, life: life, idArg: id, ticketArg: ticket}
}

// outcome is the result of one attempt.
type outcome struct {
	err     error // nil: obtained
	decided bool  // false when ctx ended the attempt before its outcome was known
	// holderTTL is, when another owner holds the lock, the shortest
	// remaining TTL of its keys; 0 otherwise.
	holderTTL time.Duration
	held      bool // another owner holds the key on some node
	behind    bool // free on some nodes, but other waiters are ahead
	waiting   int  // the most waiters a node reported
	refused   bool // for the lock's record (Spec.Conflict): no retry can help
}

// try says whether an attempt is the caller's last.
type try int

const (
	moreTries try = iota // the caller tries again after a failure: its place is kept on every node
	lastTry              // a node that refuses forgets the caller
)

// attempt makes one attempt to acquire the lock under a fresh token, and
// rolls back what it took if it fails. p is the caller's place in the
// queues; this says whether the caller will try again after a failure.
func (l *Contender) attempt(ctx context.Context, p place, this try) outcome {
	s := l.set
	// Attempts of this process on the same key take turns, so that they never
	// split the votes between them.
	gate, err := s.BeginAttempt(ctx, l.key)
	if err != nil {
		msg := fmt.Sprintf("mutex: lock %q not obtained: nothing sent; waited for another attempt of this process on the same lock", l.spec.Name)
		return outcome{err: WithCtx(NewError(msg, s.Errors.NotObtained), err)}
	}
	defer gate.End()
	if err := s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed; nothing sent", l.spec.Name, s.Errors.NotObtained); err != nil {
		return outcome{err: err, decided: true}
	}
	token := node.NewToken()
	clk, ttl := s.Clock, l.spec.TTL
	var marker string
	if s.Quarantine > 0 {
		marker = node.NewToken()
	}
	fence := "0"
	if l.spec.Fencing {
		fence = "1"
	}
	var life, id, ticket any = "0", "", int64(0)
	if p.id != "" {
		id, ticket = p.idArg, p.ticketArg
		life = "-1" // the last attempt: a node that refuses forgets the caller
		if this == moreTries {
			life = strconv.FormatInt(p.life.Milliseconds(), 10)
		}
	}
	args := []any{token, l.ttlBoxed, id, ticket, life, l.channelBoxed, marker, fence}
	if l.limitArg != nil {
		args = append(args, l.limitArg)
	}
	timeout := l.timeout()
	start := clk.Now()
	a := &acquisition{l: l, marker: marker, refused: make([]atomic.Bool, len(s.Nodes))}
	if s.Quarantine > 0 {
		a.markers = newMarkers(len(s.Nodes))
	}
	a.fanout = acquireFanouts.get(s, timeout, a.parse)
	defer a.done()
	a.dispatch(s, timeout, skipStalled, nil, s.acquireScript(l.kind), l.acquireKeys, args)
	for i := range s.Nodes {
		if !a.sent(i) {
			a.markers.heard("", time.Time{})
		}
	}
	round := a.round
	budget, stop := armed(s, ttl-l.drift)
	_ = round.Decide(ctx, budget)
	t := round.Tally()
	var number uint64
	var fenceErr *OpError
	if t.Won() && l.spec.Fencing {
		number, fenceErr = l.fence(ctx, token, a, budget, start)
	}
	stop()

	mode := "leave"
	if this == moreTries && p.id != "" {
		mode = "retry"
	}
	var why string
	is := []error{s.Errors.NotObtained}
	out := outcome{decided: t.Decided(), waiting: a.waiting()}
	switch elapsed := clk.Since(start); {
	case fenceErr != nil:
		a.rollback(ctx, token, p, mode)
		out.err = fenceErr
		return out
	case t.Won():
		if v := timing.Validity(ttl, elapsed, s.DriftFactor); v > 0 {
			var holders uint64
			for i := range s.Nodes {
				if round.Vote(i) == quorum.Yes {
					holders |= 1 << i
				}
			}
			h := newHold(l, token, p.id, start, start.Add(v), holders, number)
			if !l.adopt(h) {
				a.rollback(ctx, token, p, "leave")
				out.err = s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed during the attempt, which was rolled back", l.spec.Name, s.Errors.NotObtained)
			}
			return out
		}
		why = fmt.Sprintf("a majority answered after %v, which leaves no validity of the %v TTL (drift allowance %v)", elapsed, ttl, l.drift)
	case a.conflicts(t.N-t.Need) != "":
		a.rollback(ctx, token, p, mode)
		out.err, out.refused = l.spec.Conflict(a.conflicts(t.N-t.Need)), true
		return out
	case !t.Decided():
		why = "interrupted before a majority answered"
	case nodesFailed(round):
		why = fmt.Sprintf("%d of %d nodes failed%s, so no majority of %d is possible", t.Failed, t.N, a.inQuarantine(), t.Need)
		is = append(is, s.Errors.NodesUnavailable)
	case t.Unavailable() && t.Yes+t.Pending()+unsent(round) >= t.Need:
		why = fmt.Sprintf("this process could not send its commands in time (%d waiting to be sent); nodes did not fail", unsent(round))
	default:
		out.holderTTL, out.held, out.behind = a.soonestExpiry()
		switch {
		case out.held:
			why = fmt.Sprintf("held by another owner on %d of %d nodes", t.No, t.N)
		case out.behind:
			why = fmt.Sprintf("%d callers are waiting for it ahead of this one", out.waiting)
		default:
			why = fmt.Sprintf("the votes split between callers (%d of %d nodes refused)", t.No, t.N)
		}
		if t.Failed > 0 {
			why += fmt.Sprintf(", and %d failed", t.Failed)
		}
	}
	a.rollback(ctx, token, p, mode)
	out.err = &OpError{
		msg:   fmt.Sprintf("mutex: lock %q not obtained: %s (%v)", l.spec.Name, why, t),
		is:    is,
		nodes: nodeErrors(s, round),
	}
	return out
}

// acquisition is one attempt's fan-out of the acquire script.
type acquisition struct {
	*fanout[grant]
	l       *Contender
	marker  string        // the marker proposed to the nodes; "" when none is asked for
	markers *markers      // the markers the nodes showed; nil without the quarantine
	refused []atomic.Bool // node i answered No, however late
}

// parse reads one node's answer to the acquire script. With the restart
// quarantine on, a node in quarantine votes Failed whatever it answered;
// when that takes a round trip of its own (INFO, on first contact or after a
// sign of a restart), the answer is given later, from another goroutine.
func (a *acquisition) parse(i int, r node.Result) (quorum.Vote, grant, error) {
	fail := grant{fence: -1}
	if r.Err != nil {
		a.markers.heard("", time.Time{})
		return quorum.Failed, fail, r.Err
	}
	g, err := node.ParseGrant(r.Reply, a.marker)
	if err != nil {
		a.markers.heard("", time.Time{})
		return quorum.Failed, fail, err
	}
	gr := grant{holderTTL: g.HolderTTL, behind: !g.Acquired && g.HolderTTL == node.Behind, waiting: g.Waiting, fence: g.Fence, counter: g.Counter,
		conflict: g.Conflict}
	vote := quorum.No
	if g.Acquired {
		vote = quorum.Yes
	} else {
		a.refused[i].Store(true)
	}
	s := a.l.set
	if s.Quarantine == 0 {
		return vote, gr, nil
	}
	n := s.Nodes[i]
	seen := node.Signs{Key: a.l.key, Marker: g.Marker, NoScript: r.NoScript}
	var born time.Time // when its marker was made; zero: it does not say
	if g.MarkerAge >= 0 {
		born = s.Clock.Now().Add(-g.MarkerAge)
	}
	a.markers.heard(g.Marker, born)
	if until, ok := n.QuarantineKnown(seen); ok {
		return a.quarantined(i, vote, gr, until)
	}
	s.checks.Go(func() {
		if g.MarkerAge >= 0 && g.MarkerAge < s.Quarantine && !n.Met(a.l.key) {
			// A recent marker: the node lost its data if another node's
			// marker is older; a brand-new set's are all one. Judged
			// before the round would give up on the node.
			wait, stop := armed(s, r.Sent.Add(a.timeout*7/8).Sub(s.Clock.Now()))
			older, known := a.markers.olderThan(g.Marker, born, wait)
			stop()
			if !known {
				a.answer(i, quorum.Failed, gr, NewError("its marker is recent, and too few nodes answered in time to tell whether it lost its data", s.Errors.Quarantined))
				return
			}
			if older {
				seen.Remade = born
			}
		}
		until, err := n.Quarantined(context.Background(), seen, s.Quarantine, s.Clock.Now)
		if err != nil {
			a.answer(i, quorum.Failed, gr, err)
			return
		}
		v, g, err := a.quarantined(i, vote, gr, until)
		a.answer(i, v, g, err)
	})
	return quorum.Pending, gr, nil
}

// soonestExpiry returns how long until enough of the other owners' keys
// that refused the attempt can have expired for a majority to be free (the
// remaining TTL of the k-th soonest, k being the nodes still missing from a
// majority; the longest known when fewer refused with a TTL), at least 1ms (a
// key about to expire reports 0), or 0 if none has one; whether another
// owner's key refused it on some node; and whether some node refused only
// because other waiters are ahead.
func (a *acquisition) soonestExpiry() (soonest time.Duration, held, behind bool) {
	var ttls []time.Duration
	for _, rep := range a.round.Replies() {
		if rep.Vote != quorum.No {
			continue
		}
		g := rep.Value
		if g.behind {
			behind = true
			continue
		}
		held = true
		if g.holderTTL < 0 { // PTTL -1: no expiry, not a lock key of ours
			continue
		}
		ttls = append(ttls, max(g.holderTTL, time.Millisecond))
	}
	if len(ttls) == 0 {
		return 0, held, behind
	}
	slices.Sort(ttls)
	t := a.round.Tally()
	k := min(max(t.Need-t.Yes, 1), len(ttls))
	return ttls[k-1], held, behind
}

// conflicts returns what more than spare nodes refused the attempt for,
// because of the lock's record (node.Grant.Conflict: a permit's semaphore
// holding another limit, an idempotency key's result), so many that the
// others cannot make a majority; else "". Fewer such nodes refuse like a
// holder (a live holder's limit is on a majority: one on fewer nodes is
// what a rolled-back attempt left).
func (a *acquisition) conflicts(spare int) string {
	other, n := "", 0
	for _, rep := range a.round.Replies() {
		if c := rep.Value.conflict; c != "" {
			other, n = c, n+1
		}
	}
	if n > spare {
		return other
	}
	return ""
}

// waiting returns the most waiters any node reported.
func (a *acquisition) waiting() int {
	most := 0
	for _, rep := range a.round.Replies() {
		most = max(most, rep.Value.waiting)
	}
	return most
}

// rollback releases token on every node the failed attempt may have taken
// the key on. On a node whose acquire is still unanswered, the release is
// queued behind it, so a late acquire is undone after it, never overtaken
// (and an acquire not sent yet is withdrawn instead). It waits for the nodes
// that said Yes (at most the per-node timeout, and no longer than ctx); the
// releases queued behind unanswered acquires complete on their own. With
// mode "retry" the caller keeps its place in every node's queue; with
// "leave" it is removed from them, on every node. No release publishes
// anything but a turn to the waiter first in a queue.
func (a *acquisition) rollback(ctx context.Context, token string, p place, mode string) {
	l := a.l
	s := l.set
	args := l.releaseArgs(token, mode, p, 0)
	// A leaving caller may hold a place on every node; an acquire that
	// reaches a node removes it there when it is refused.
	leaving := mode == "leave" && p.id != ""
	var answered uint64
	for i := range s.Nodes {
		switch v := a.round.Vote(i); {
		case v == quorum.Yes:
			answered |= 1 << i
		case v == quorum.No:
		case !a.sent(i):
			// Skipped, stalled: only our place there, if any, is left.
			if leaving {
				sendAndForget(s, i, l.kind.Release, l.releaseKeys, args, nil)
			}
		case a.cmds[i].Cancel():
			// Withdrawn before it left: the release still keeps (retry) or
			// removes (leave) our place there, so that every node queues
			// the same waiters and names the same next owner.
			if p.id != "" {
				sendAndForget(s, i, l.kind.Release, l.releaseKeys, args, nil)
			}
		default:
			// Queued behind the acquire, and skipped if that was refused.
			sendAndForget(s, i, l.kind.Release, l.releaseKeys, args, a.refused[i].Load)
		}
	}
	if answered == 0 {
		return
	}
	l.releaseAll(ctx, func(i int) bool { return answered&(1<<i) != 0 }, args)
}

// parseRelease reads a node's answer to the release script: Yes when the
// key was ours and is gone.
func parseRelease(_ int, r node.Result) (quorum.Vote, released, error) {
	if r.Err != nil {
		return quorum.Failed, released{}, r.Err
	}
	status, head, err := node.ParseRelease(r.Reply)
	if err != nil {
		return quorum.Failed, released{}, err
	}
	rel := released{status: status, head: head}
	if status == node.Released || status == node.Tombstone {
		return quorum.Yes, rel, nil
	}
	return quorum.No, rel, nil
}

// released is one node's answer to a release.
type released struct {
	status node.Release
	head   string
}
