package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// place is a call's place in the nodes' queues: waiter id, ticket (smaller
// first) and life unrenewed, also boxed as arguments; the zero place does not queue.
type place struct {
	id                        string
	ticket                    int64
	life                      time.Duration
	idArg, ticketArg, lifeArg any
}

func newPlace(id string, ticket int64, life time.Duration) place {
	return place{id: id, ticket: ticket, life: life, idArg: id, ticketArg: ticket, lifeArg: strconv.FormatInt(life.Milliseconds(), 10)}
}

// What the release script does with the caller's place (release.lua's ARGV[3]).
const (
	modeRelease = "release" // the holder is done; its place is removed
	modeRetry   = "retry"   // a failed attempt whose caller tries again: kept
	modeLeave   = "leave"   // the caller stops waiting: removed
)

// outcome is the result of one attempt.
type outcome struct {
	err       error         // nil: obtained
	decided   bool          // false when ctx ended the attempt before its outcome was known
	holderTTL time.Duration // when another owner holds it: when a majority of its keys can have expired
	taken     bool          // another owner holds the key on some node, or other waiters are ahead
	refused   bool          // for the lock's record (Spec.Conflict), or nodes refusing this client as configured: no retry can help
	skipped   bool          // not made: optional, or ctx ended before its turn
	latest    error         // when skipped: the latest decided attempt's error on the key (Gate)
}

// errSkipped is a skipped look's outcome: the previous one stands (never returned).
var errSkipped = errors.New("engine: a look to keep a place, skipped")

// attempt makes one attempt under a fresh token, rolled back if it fails,
// leaving place p as mode says. An optional one (a look to keep the place)
// is skipped while another of this process's attempts on the key runs or waits.
func (l *Contender) attempt(ctx context.Context, p place, mode string, optional bool) (res outcome) {
	s := l.set
	gate, latest, err := s.BeginAttempt(ctx, l.key, optional) // this process's attempts on the key take turns
	switch {
	case optional && gate == nil:
		return outcome{err: errSkipped, taken: true, skipped: true, latest: latest}
	case err != nil:
		msg := fmt.Sprintf("mutex: lock %q not obtained: nothing sent; waited for another attempt of this process on the same lock", l.spec.Name)
		return outcome{err: WithCtx(NewError(msg, s.Errors.NotObtained), err), skipped: true, latest: latest}
	}
	defer func() { gate.End(res.err, res.decided) }()
	if s.Quarantine > 0 {
		end, err := s.firstContact(ctx, l.key)
		if err != nil {
			msg := fmt.Sprintf("mutex: lock %q not obtained: nothing sent; waited for this process's first attempt on the nodes", l.spec.Name)
			return outcome{err: WithCtx(NewError(msg, s.Errors.NotObtained), err), skipped: true}
		}
		defer end()
	}
	if err := s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed; nothing sent", l.spec.Name, s.Errors.NotObtained); err != nil {
		return outcome{err: err, decided: true}
	}
	token, fence := node.NewToken(), "0"
	a := &acquisition{l: l}
	if s.Quarantine > 0 {
		a.marker, a.markers = node.NewToken(), node.NewMarkers(len(s.Nodes))
	}
	if l.spec.Fencing {
		fence = "1"
	}
	var id, ticket, life any = "", int64(0), "0"
	if p.id != "" {
		id, ticket, life = p.idArg, p.ticketArg, "-1" // -1: a node that refuses forgets the caller
		if mode == modeRetry {
			life = p.lifeArg
		}
	}
	args := []any{token, l.ttlBoxed, id, ticket, life, l.channelBoxed, a.marker, fence}
	if l.limitArg != nil {
		args = append(args, l.limitArg)
	}
	timeout, ttl := l.timeout(), l.spec.TTL
	start := s.Clock.Now()
	a.fanout = newFanout(&acquireFanouts, s, timeout, a.parse)
	a.round.StopOn(s.Closing()) // Close: no more waiting for the nodes, roll back now
	defer a.done()
	a.dispatch(skipStalled, nil, s.acquireScript(l.kind), l.acquireKeys, args)
	for i := range s.Nodes {
		if !a.sent(i) {
			a.markers.Heard("", time.Time{})
		}
	}
	budget, stop := timing.Timer(s.Clock, ttl-l.drift)
	_ = a.decide(ctx, budget)
	// open: lost with failures, and the nodes still out could make a majority answered.
	open := func(t quorum.Tally) bool {
		return t.Pending() > 0 && t.Unavailable() && t.Yes+t.No+t.Pending() >= t.Need
	}
	if t := a.round.Tally(); l.kind.OneRecordRefuses && t.Won() || open(t) {
		// Every node within a per-node timeout from now: a hung one's
		// commands may not have left yet; or a lost round's nodes still out
		// tell contention from an outage ("Contention or outage").
		wait, stopWait := timing.Timer(s.Clock, min(timeout, l.budget(start)))
		_ = a.round.Collect(ctx, wait)
		stopWait()
	}
	t := a.round.Tally()
	var number uint64
	var fenceErr *OpError
	if t.Won() && l.spec.Fencing {
		number, fenceErr = l.fence(ctx, token, a, budget, start)
	}
	stop()

	// What the nodes said against it (a record's refusals: design.md, "Semaphore").
	out := outcome{decided: t.Decided() && !open(t)}
	var ttls []time.Duration   // the other owner's keys' remaining TTLs
	held, behind := 0, 0       // nodes where another owner holds the key; that refused it for places ahead
	var holders, absent uint64 // nodes that granted it; that never had the token (refused, or never reached)
	conflict, conflicts, waiting, unsent, late, quarantined, refusing := "", 0, 0, 0, 0, 0, 0
	for _, rep := range a.round.Replies() {
		g := rep.Value
		waiting = max(waiting, g.Waiting)
		if g.Conflict != "" {
			conflict, conflicts = g.Conflict, conflicts+1
		}
		if rep.Vote == quorum.No || !a.sent(rep.Node) || a.unsent.Load()&(1<<rep.Node) != 0 {
			absent |= 1 << rep.Node
		}
		switch {
		case rep.Vote == quorum.Yes:
			holders |= 1 << rep.Node
		case rep.Vote == quorum.No && g.HolderTTL == node.Behind:
			behind++
		case rep.Vote == quorum.No:
			held++
			if g.HolderTTL >= 0 { // PTTL -1: no expiry, not a lock key of ours
				ttls = append(ttls, max(g.HolderTTL, time.Millisecond))
			}
		case errors.Is(rep.Err, round.ErrNotSent):
			unsent++
		case errors.Is(rep.Err, round.ErrCutShort):
			late++
		case errors.Is(rep.Err, s.Errors.Quarantined):
			quarantined++
		case node.Refuses(rep.Err):
			refusing++
		}
	}
	var why string
	var is []error // besides NotObtained: built only for a failure, so a won attempt allocates none
	switch elapsed := s.Clock.Since(start); {
	case fenceErr != nil:
		out.err = fenceErr
	case conflicts > t.N-t.Need || conflicts > 0 && l.kind.OneRecordRefuses:
		out.err, out.refused = l.spec.Conflict(conflict), true
	case t.Won():
		if v := timing.Validity(ttl, elapsed, s.DriftFactor); v > 0 {
			h := newHold(l, token, p.id, start, elapsed, start.Add(v+elapsed), holders, number)
			h.absent = absent
			if l.adopt(h) {
				a.won.Store(h) // the nodes that grant it from now on hold it too
				return out
			}
			mode = modeLeave
			out.err = s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed during the attempt, which was rolled back", l.spec.Name, s.Errors.NotObtained)
			break
		}
		why = fmt.Sprintf("a majority answered after %v, which leaves no validity of the %v TTL (drift allowance %v)", elapsed, ttl, l.drift)
	case open(t) || !t.Decided() && t.Yes+t.No >= t.Need: // ctx or Close ended the wait for them
		why = "interrupted while the nodes still out could have told a held lock from failed nodes"
	case !t.Decided():
		why = "interrupted before a majority answered"
	case t.Unavailable() && t.Yes+t.No+unsent+late < t.Need: // for want of nodes (design.md, "Contention or outage")
		why = fmt.Sprintf("%d of %d nodes failed", t.Failed-unsent-late, t.N)
		if quarantined > 0 {
			why += fmt.Sprintf(" (%d in restart quarantine)", quarantined)
		}
		why += fmt.Sprintf(", so no majority of %d is possible", t.Need)
		is = append(is, s.Errors.NodesUnavailable)
		if refusing > t.N-t.Need { // not without them: no retry can help
			why += fmt.Sprintf("; %d refuse this client's credentials or ACL permissions, which waiting does not change", refusing)
			out.refused = true
		}
	case t.Unavailable() && t.Yes+t.Pending()+unsent+late >= t.Need:
		why = fmt.Sprintf("the validity (%v TTL less %v drift allowance) ran out before this process had sent its commands (%d waiting to be sent) "+
			"and read their answers (%d nodes asked, none silent for its %v per-node timeout yet): not counted as node failures, though the tally's failed votes count them", ttl, l.drift, unsent, late, timeout)
		if failed := t.Failed - unsent - late; failed > 0 {
			why += fmt.Sprintf("; %d more failed", failed)
		}
	default:
		out.taken = held > 0 || behind > 0
		is = append(is, s.Errors.Contended)
		if len(ttls) > 0 { // when enough of them can have expired for a majority
			slices.Sort(ttls)
			out.holderTTL = ttls[min(max(t.Need-t.Yes, 1), len(ttls))-1]
		}
		switch {
		case held > 0 && behind > 0:
			why = fmt.Sprintf("held by another owner on %d of %d nodes, and refused on %d for callers ahead of this one in their queues", held, t.N, behind)
		case held > 0:
			why = fmt.Sprintf("held by another owner on %d of %d nodes", held, t.N)
		case behind > 0:
			why = fmt.Sprintf("other callers are ahead of this one in the nodes' queues (%d queued)", waiting)
		default:
			why = fmt.Sprintf("the votes split between callers (%d of %d nodes refused)", t.No, t.N)
		}
		if t.Failed > 0 {
			why += fmt.Sprintf(", and %d failed", t.Failed)
		}
	}
	if out.err == nil {
		is = append([]error{s.Errors.NotObtained}, is...)
		out.err = &OpError{msg: fmt.Sprintf("mutex: lock %q not obtained: %s (%v)", l.spec.Name, why, t), is: is, nodes: nodeErrors(s, a.round)}
	}
	a.rollback(ctx, token, p, mode)
	return out
}

// acquisition is one attempt's fan-out of the acquire script.
type acquisition struct {
	*fanout[node.Grant]
	l       *Contender
	marker  string        // the marker proposed to the nodes; "" when none is asked for
	markers *node.Markers // the markers the nodes showed; nil without the quarantine
	refused atomic.Uint64 // bit i: node i answered No, however late
	lost    atomic.Uint64 // bit i: node i's answer was lost: the acquire may still run there
	unsent  atomic.Uint64 // bit i: node i's acquire never reached it (node.Undelivered)
	won     atomic.Pointer[Hold]
}

// granted records a Yes of node i: one read after the acquisition was
// adopted makes the node one of its holders, as those counted before.
func (a *acquisition) granted(i int, v quorum.Vote) quorum.Vote {
	if h := a.won.Load(); h != nil && v == quorum.Yes {
		h.lock.mu.Lock()
		if h.held && h.suspect&(1<<i) == 0 {
			h.holders |= 1 << i
			h.absent &^= 1 << i
		}
		h.lock.mu.Unlock()
	}
	return v
}

// releaseAgain is a rollback's release behind an unanswered acquire, sent
// again if that acquire's reply was lost and it found no key, or once the
// node answers if the release itself got no answer ("Rollback").
type releaseAgain struct {
	a    *acquisition
	args []any
}

func (r *releaseAgain) Sent(int, time.Time) {}

func (r *releaseAgain) Receive(i int, res node.Result) {
	l, n := r.a.l, r.a.l.set.Nodes[i]
	switch status, _, err := node.ParseRelease(res.Reply); {
	case err == nil && (status == node.Released || r.a.lost.Load()&(1<<i) == 0):
	case err == nil: // answered: what the node had received before has run
		n.Forget(l.kind.Release, l.releaseKeys.names, l.releaseKeys.args, r.args, nil)
	default: // not run, or not known to have run: its acquire may have landed
		n.Later(l.kind.Release, l.releaseKeys.names, l.releaseKeys.args, r.args)
	}
}

// parse reads a node's answer to the acquire script; a node in restart
// quarantine votes Failed, judged later, in a goroutine, if that takes an INFO.
func (a *acquisition) parse(i int, r node.Result) (quorum.Vote, node.Grant, error) {
	if r.Err != nil {
		a.lost.Or(1 << i)
		if node.Undelivered(r.Err) {
			a.unsent.Or(1 << i)
		}
	}
	g, err := node.ParseGrant(r.Reply, a.marker)
	if err != nil {
		a.markers.Heard("", time.Time{})
		return quorum.Failed, node.Grant{Fence: -1}, err
	}
	if !g.Acquired {
		a.refused.Or(1 << i)
	}
	s, said := a.l.set, vote(g.Acquired, nil)
	if s.Quarantine == 0 {
		return a.granted(i, said), g, nil
	}
	n := s.Nodes[i]
	seen := node.Signs{Key: a.l.key, Marker: g.Marker, NoScript: r.NoScript}
	var born time.Time // when its marker was made; zero: it does not say
	if g.MarkerAge >= 0 {
		born = s.Clock.Now().Add(-g.MarkerAge)
	}
	a.markers.Heard(g.Marker, born)
	if q, ok := n.QuarantineKnown(seen); ok {
		return a.quarantined(i, said, g, q)
	}
	s.checks.Go(func() {
		if g.MarkerAge >= 0 && g.MarkerAge < s.Quarantine && !n.Met(a.l.key) {
			// A recent marker: lost its data if another node's is older
			// (design.md, "Restart quarantine"), judged within the timeout.
			wait, stop := timing.Timer(s.Clock, r.Sent.Add(a.timeout*7/8).Sub(s.Clock.Now()))
			older, known := a.markers.OlderThan(g.Marker, born, wait)
			stop()
			if !known {
				a.answer(i, quorum.Failed, g, NewError("its marker is recent, and too few nodes answered in time to tell whether it lost its data", s.Errors.Quarantined))
				return
			}
			if older {
				seen.Remade = born
			}
		}
		q, err := n.Quarantined(context.Background(), seen, s.Quarantine, s.Clock.Now)
		if err != nil {
			a.answer(i, quorum.Failed, g, err)
			return
		}
		v, g, err := a.quarantined(i, said, g, q)
		a.answer(i, v, g, err)
	})
	return quorum.Pending, g, nil
}

// quarantined fails a node's vote while it is in quarantine q.
func (a *acquisition) quarantined(i int, vote quorum.Vote, g node.Grant, q node.Quarantine) (quorum.Vote, node.Grant, error) {
	s := a.l.set
	if s.Observer != nil {
		s.Nodes[i].ReportQuarantine(s.Observer, q.Until)
	}
	if g.Fence > 0 && s.Nodes[i].FenceStale(a.l.key) {
		g.Fence = 0 // its counter may be an old one restored from a snapshot: it does not vouch
	}
	if s.Clock.Now().Before(q.Until) {
		return quorum.Failed, g, fmt.Errorf("%w: %s; it counts again from %s", s.Errors.Quarantined, q.Why, q.Until.Format(time.RFC3339))
	}
	return a.granted(i, vote), g, nil
}

// rollback releases token, leaving the place as mode says, wherever the
// attempt may have taken the key ("Rollback"), waiting for the nodes that
// said Yes within the per-node timeout and ctx.
func (a *acquisition) rollback(ctx context.Context, token string, p place, mode string) {
	l, s, args := a.l, a.l.set, a.l.releaseArgs(token, mode, p, 0)
	keys := l.releaseKeys
	leaving := mode == modeLeave && p.id != "" // it may have a place on a node it did not reach
	var answered uint64
	for i := range s.Nodes {
		switch v := a.round.Vote(i); {
		case v == quorum.Yes:
			answered |= 1 << i
		case v == quorum.No, !a.sent(i) && !leaving: // refused; skipped (stalled) with no place there to remove
		case !a.sent(i) || a.cmds[i].Cancel(): // withdrawn unsent: every node must queue the same waiters
			if p.id != "" {
				s.Nodes[i].Forget(l.kind.Release, keys.names, keys.args, args, nil)
			}
		default: // queued behind the acquire, skipped if that was refused, sent again if its reply was lost
			s.Nodes[i].Send(&node.Cmd{Script: l.kind.Release, Keys: keys.names, KeyArgs: keys.args, Args: args,
				To: &releaseAgain{a: a, args: args}, Index: i, Unless: func() bool { return a.refused.Load()&(1<<i) != 0 }})
		}
	}
	if answered != 0 {
		l.releaseAll(ctx, func(i int) bool { return answered&(1<<i) != 0 }, args)
	}
}
