package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/internal/notify"
)

// Acquire obtains the lock in at most tries attempts (0: no limit), waiting
// between them as docs/design.md ("Waiting") describes, until ctx ends; the
// caller holds the op slot and no acquisition. It returns the error of the
// last attempt that reached an outcome, joined with ctx's error if ctx ended
// the wait. waiting, if not nil, is called once, when an attempt first finds
// the lock taken or others ahead.
func (l *Contender) Acquire(ctx context.Context, tries int, waiting func()) error {
	s := l.set
	if !s.track(nil) {
		return s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed; nothing sent", l.spec.Name, s.Errors.NotObtained)
	}
	defer s.close.calls.Done() // last: after the rollbacks and departures from the queues
	var p place
	if tries != 1 && s.Notify {
		p = newPlace(s.Hub().NewID(), s.Clock.Now().UnixMicro(), 3*l.spec.RetryMax+500*time.Millisecond)
	}
	var waiter *notify.Waiter // subscribed to releases once the lock was found taken
	// me may be passed the lock: joined once the call must wait (design.md, "Who receives").
	var me *heir
	var wake, again, nudge <-chan struct{} // waiter's and me's, for sleep; nil before them
	var got <-chan *Hold
	began := s.Clock.Now().UnixMicro()
	join := func() {
		if me == nil && tries != 1 && l.plain() {
			me = s.cohort.join(l, p, began, ctx.Done())
			got, nudge = me.got, me.nudge
		}
	}
	defer func() {
		if me != nil {
			if n := s.cohort.leave(me); n != nil {
				l.abandon(n)
			}
		}
		if waiter != nil {
			waiter.Stop()
		}
	}()
	// sleep waits for d, a release, a pass (returned), a nudge, Close or ctx's
	// end (its error); with unlimited tries, also for a call to look again.
	sleep := func(d time.Duration) (*Hold, error) {
		timer := s.Clock.NewTimer(d)
		defer timer.Stop()
		select {
		case n := <-got:
			return n, nil
		case <-timer.C():
		case <-wake:
		case <-again:
		case <-nudge:
		case <-s.Closing(): // the next attempt reports it
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, nil
	}
	// A waiter told of releases looks again after half to all of RetryMax.
	queued := func() time.Duration { return l.spec.RetryMax/2 + rand.N(l.spec.RetryMax/2+1) }
	noteWaiting := func() {
		if waiting != nil {
			waiting()
			waiting = nil
		}
	}
	if tries != 1 && l.passable() && s.cohort.held(l) {
		join()
	}
	if me != nil && s.cohort.held(l) { // still, once joined: its release or pass sees me
		// Wait for the pass, or a nudge to look at the nodes (design.md, "The nodes' queue").
		l.attempts = 0
		noteWaiting()
		me.local.Store(true)
		n, err := sleep(queued())
		me.local.Store(false)
		if n != nil {
			return l.received(n)
		}
		if err != nil {
			return WithCtx(NewError(fmt.Sprintf("mutex: lock %q not obtained: held by another owner in this process, a caller of the same Redlock, which did not pass it here; nothing sent", l.spec.Name), s.Errors.NotObtained), err)
		}
	}
	var last error  // the cause of the latest attempt that was decided
	behind := false // the latest wait was only to keep a place, behind an older call of this Redlock
	for attempt := 0; ; attempt++ {
		select { // a wake-up from before this attempt: the attempt sees the nodes as they are
		case <-wake:
		default:
		}
		mode := modeRetry
		if tries > 0 && attempt+1 >= tries {
			mode = modeLeave // the last attempt leaves the queues itself
		}
		out := l.attempt(ctx, p, mode, behind && mode == modeRetry)
		if out.skipped { // not made, and not counted: the call ahead's outcome is its own ("Waiting")
			attempt--
			if a := s.cohort.ahead(me); a != nil {
				if e := a.latest.Load(); e != nil {
					last = *e
				}
			}
		}
		if l.attempts = attempt + 1; out.err == nil {
			return nil
		}
		if out.decided || last == nil {
			last = out.err
		}
		err := s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed", l.spec.Name, s.Errors.NotObtained)
		switch {
		case err != nil:
		case out.refused:
			err = out.err
		case ctx.Err() != nil:
			err = WithCtx(last, ctx.Err())
		case mode == modeLeave:
			return out.err
		}
		if err != nil {
			if mode == modeRetry {
				l.leaveQueues(p)
			}
			return err
		}
		// Backoff: uniform in [0, min(RetryMax, RetryMin*2^attempt)).
		d := l.spec.RetryMax
		behind = false
		if b := l.spec.RetryMin << attempt; attempt < 62 && b > 0 && b < d {
			d = b
		}
		d = rand.N(d)
		if out.taken {
			// Taken, or others are ahead: wait to be told it is our turn.
			noteWaiting()
			if s.Notify {
				if waiter == nil {
					waiter = s.Hub().Wait(p.id, l.channels...)
					if wake = waiter.Wake(); tries == 0 {
						again = waiter.Recheck()
					}
				}
				if d, behind = queued(), s.cohort.ahead(me) != nil; behind {
					d += l.spec.RetryMax // not the nodes' next: it looks only to keep its place ("Waiting")
				}
			}
			// Not before the holder's keys can have expired (design.md, "Fallbacks, and
			// tries"); a sum past the largest Duration wraps below zero: not soon, then.
			if ttl := out.holderTTL; ttl > 0 {
				if expiry := ttl + time.Millisecond + time.Duration(float64(ttl)*s.DriftFactor); expiry > 0 && (expiry <= 2*l.spec.RetryMax || expiry < d) {
					d = expiry
				}
			}
		}
		if join(); me != nil {
			latest := last
			me.latest.Store(&latest)
		}
		n, err := sleep(d)
		if n != nil {
			return l.received(n)
		}
		if err != nil {
			l.leaveQueues(p)
			return WithCtx(last, err)
		}
	}
}

// leaveQueues removes a caller that gives up after an attempt that kept its
// place from every node's queue, without waiting ("Waiting").
func (l *Contender) leaveQueues(p place) {
	if p.id != "" {
		l.releaseAndForget(l.releaseArgs("-", modeLeave, p, 0))
	}
}
