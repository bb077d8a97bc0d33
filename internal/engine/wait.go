package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/internal/notify"
)

// Acquire obtains the lock in at most tries attempts (0: no limit), waiting
// between them ("Waiting") until ctx ends; the caller holds the op slot. It
// returns the last decided attempt's error, joined with ctx's if ctx ended
// the wait. waiting, if not nil, is called once, when first found taken.
func (l *Contender) Acquire(ctx context.Context, tries int, waiting func()) error {
	s := l.set
	if !s.track(nil, l) {
		return s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed; nothing sent", l.spec.Name, s.Errors.NotObtained)
	}
	defer s.close.calls.Done() // last: after the rollbacks and departures from the queues
	var p place
	if tries != 1 && s.Notify {
		p = newPlace(s.Hub().NewID(), s.Clock.Now().UnixMicro(), 3*l.spec.RetryMax+500*time.Millisecond)
	}
	var waiter *notify.Waiter              // subscribed once the lock was found taken
	var me *heir                           // may be passed the lock: joined once the call waits ("Who receives")
	var wake, again, nudge <-chan struct{} // waiter's and me's, for sleep
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
	// sleep waits for d, a release, a pass (returned), a nudge, a recheck, Close or ctx.
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
		l.attempts = 0
		noteWaiting()
		me.local.Store(true)
		n, err := sleep(queued())
		me.local.Store(false)
		if n != nil {
			return l.received(n)
		}
		if err != nil {
			return WithCtx(NewError(fmt.Sprintf("mutex: lock %q not obtained: held by another owner in this process, a caller of the same Redlock, which did not pass it here; nothing sent", l.spec.Name), s.Errors.NotObtained, s.Errors.Contended), err)
		}
	}
	var last error  // the cause of the latest attempt that was decided
	behind := false // the latest wait was only to keep a place, behind an older call of this Redlock
	for attempt := 0; ; attempt++ {
		select { // a wake-up from before: the attempt sees the nodes as they are
		case <-wake:
		default:
		}
		mode := modeRetry
		if tries > 0 && attempt+1 >= tries {
			mode = modeLeave // the last attempt leaves the queues itself
		}
		out := l.attempt(ctx, p, mode, behind && mode == modeRetry)
		if out.skipped { // not made, and not counted: the latest outcome on the key is its own ("Waiting")
			attempt--
			if out.latest != nil {
				last = out.latest
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
			// Not before the holder's keys can have expired ("Fallbacks, and tries").
			if ttl := out.holderTTL; ttl > 0 {
				if expiry := ttl + time.Millisecond + time.Duration(float64(ttl)*s.DriftFactor); expiry > 0 && (expiry <= 2*l.spec.RetryMax || expiry < d) {
					d = expiry
				}
			}
		}
		join()
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

// leaveQueues removes a caller's place from every node's queue, without waiting.
func (l *Contender) leaveQueues(p place) {
	if p.id != "" {
		l.releaseAndForget(l.releaseArgs("-", modeLeave, p, 0))
	}
}
