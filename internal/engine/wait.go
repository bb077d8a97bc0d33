package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/internal/notify"
)

// Acquire obtains the lock in at most tries attempts (0: no limit), waiting
// between them as docs/design.md describes, until ctx ends. The caller holds
// the op slot and has checked that no acquisition is held. It returns the
// error of the last attempt that reached an outcome, joined with ctx's error
// if ctx ended the wait. waiting, if not nil, is called once, when an attempt
// first finds the lock taken or others ahead.
func (l *Contender) Acquire(ctx context.Context, tries int, waiting func()) (err error) {
	s := l.set
	var p place
	if tries != 1 && s.Notify {
		p = newPlace(s.Hub().NewID(), s.Clock.Now().UnixMicro(), l.placeLife())
	}
	// A call with unlimited tries also looks again when its new
	// subscription is confirmed (a release before then was not heard); one
	// with a limited number does not spend a try on it.
	wake := onRelease
	if tries == 0 {
		wake = onReleaseOrRecheck
	}
	var last error            // the cause of the latest attempt that was decided
	var waiter *notify.Waiter // subscribed to releases once the lock was found taken
	var me *heir              // may receive the lock from another caller of the set (pass.go)
	if tries != 1 && l.passable() {
		me = s.cohort.join(l, p, s.Clock.Now().UnixMicro(), ctx.Done())
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
	if me != nil && s.cohort.held(l) {
		// Held in this process by a caller that may pass it here: wait
		// for that, or to be told to look at the nodes (pass.go).
		l.attempts = 0
		if waiting != nil {
			waiting()
			waiting = nil
		}
		me.local.Store(true)
		n, err := l.sleep(ctx, l.queuedWait(), nil, wake, me)
		me.local.Store(false)
		if n != nil {
			return l.received(n)
		}
		if err != nil {
			return WithCtx(NewError(fmt.Sprintf("mutex: lock %q not obtained: held by another owner in this process, a caller of the same Redlock, which did not pass it here; nothing sent", l.spec.Name), s.Errors.NotObtained), err)
		}
	}
	for attempt := 0; ; attempt++ {
		if waiter != nil {
			select { // a wake-up from before this attempt: the attempt sees the nodes as they are
			case <-waiter.Wake():
			default:
			}
		}
		this := moreTries
		if tries > 0 && attempt+1 >= tries {
			this = lastTry
		}
		l.attempts = attempt + 1
		out := l.attempt(ctx, p, this)
		if out.err == nil {
			return nil
		}
		if cerr := s.ErrIfClosed("mutex: lock %q not obtained: the node set was closed", l.spec.Name, s.Errors.NotObtained); cerr != nil {
			if this == moreTries { // a last attempt left the queues itself
				l.leaveQueues(p)
			}
			return cerr
		}
		if out.refused {
			if this == moreTries {
				l.leaveQueues(p)
			}
			return out.err
		}
		if out.decided || last == nil {
			last = out.err
		}
		if cerr := ctx.Err(); cerr != nil {
			if this == moreTries {
				l.leaveQueues(p)
			}
			return WithCtx(last, cerr)
		}
		if this == lastTry {
			return out.err
		}
		wait := l.backoff(attempt)
		if out.held || out.behind {
			// Taken, or others are ahead: wait to be told it is our turn,
			// and look again at the latest when the holder's key can have
			// expired (it crashed). The fallback timer only covers a lost
			// message: a waiter polling sooner would only be refused.
			if waiting != nil {
				waiting()
				waiting = nil
			}
			if s.Notify {
				if waiter == nil {
					waiter = s.Hub().Wait(p.id, l.channels...)
				}
				wait = l.queuedWait()
			}
			if out.holderTTL > 0 {
				// A holder's key that expires within twice the retry
				// ceiling is looked at once it can have expired, never
				// before: an earlier release is heard (without
				// notifications, found at the key's expiry), and no try is
				// spent on a look that can only find the key still there.
				if expiry := l.afterExpiry(out.holderTTL); expiry <= 2*l.spec.RetryMax || expiry < wait {
					wait = expiry
				}
			}
		}
		n, werr := l.sleep(ctx, wait, waiter, wake, me)
		if n != nil {
			return l.received(n)
		}
		if werr != nil {
			l.leaveQueues(p)
			return WithCtx(last, werr)
		}
	}
}

// leaveQueues removes a caller that gives up after an attempt that kept its
// place (moreTries) from every node's queue. It does not wait: the caller
// gives up because ctx ended or the set closed. On each node the removal is
// queued behind the caller's own commands (a late acquire cannot put the
// place back after it), and before any later command of the set.
func (l *Contender) leaveQueues(p place) {
	if p.id == "" {
		return
	}
	args := l.releaseArgs("-", "leave", p, 0)
	for i := range l.set.Nodes {
		sendAndForget(l.set, i, l.kind.Release, l.releaseKeys, args, nil)
	}
}

// placeLife is how long a waiter's place in a node's queue lasts unless an
// attempt renews it: longer than the longest wait between two attempts.
func (l *Contender) placeLife() time.Duration { return 3*l.spec.RetryMax + 500*time.Millisecond }

// afterExpiry is when to look again at a lock whose key has ttl left on a
// node: Redis rounds the TTL it reports down to the millisecond, and the
// node's clock may run slower than ours by the drift factor.
func (l *Contender) afterExpiry(ttl time.Duration) time.Duration {
	return ttl + time.Millisecond + time.Duration(float64(ttl)*l.set.DriftFactor)
}

// queuedWait is how long a waiter told of releases sleeps before it looks
// again on its own, in case a message was lost: between half and all of the
// largest retry delay.
func (l *Contender) queuedWait() time.Duration {
	return l.spec.RetryMax/2 + rand.N(l.spec.RetryMax/2+1)
}

// backoff returns the sleep before attempt+1: uniform in [0, min(max, min*2^attempt)).
func (l *Contender) backoff(attempt int) time.Duration {
	ceiling := l.spec.RetryMax
	if attempt < 62 {
		if d := l.spec.RetryMin << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling)
}

// wakeups says what ends a waiter's sleep early, besides the set closing
// and its context ending.
type wakeups int

const (
	onRelease          wakeups = iota // a release (Waiter.Wake)
	onReleaseOrRecheck                // also a call to look again (Waiter.Recheck)
)

// sleep waits for d, or until w (if not nil) is woken as on says, or until
// me (if not nil) is passed the lock, which it returns, or nudged, or until
// the set closes, or until ctx ends, in which case it returns ctx.Err().
func (l *Contender) sleep(ctx context.Context, d time.Duration, w *notify.Waiter, on wakeups, me *heir) (*Hold, error) {
	var wake, again, nudge <-chan struct{}
	var got <-chan *Hold
	if w != nil {
		wake = w.Wake()
		if on == onReleaseOrRecheck {
			again = w.Recheck()
		}
	}
	if me != nil {
		got, nudge = me.got, me.nudge
	}
	timer := l.set.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case n := <-got:
		return n, nil
	case <-timer.C():
	case <-wake:
	case <-again:
	case <-nudge:
	case <-l.set.Closing(): // the next attempt reports it
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}
