package mutex

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// never is the Lost channel of a Mutex that has never held a lock: it is
// never closed.
var never = make(chan struct{})

// lease is the lifetime of one acquisition: the Lost channel, and the watcher
// goroutine that renews the lock (WithAutoExtend) and closes Lost before the
// validity ends. The Mutex owns it; UnlockContext ends the watcher.
type lease struct {
	lost     chan struct{} // closed when the acquisition is lost
	lostOnce sync.Once
	cause    error // why, set before lost is closed

	// The current watcher, if any; guarded by the Mutex's mu.
	stop    chan struct{} // closed to stop it
	done    chan struct{} // closed when it has returned; nil if none was started
	ending  bool          // UnlockContext is ending the lease: Lost starts no watcher
	renew   bool          // the current watcher renews (WithAutoExtend), not only watches
	nudge   chan struct{} // one slot: Until moved (a manual extension)
	renewed int           // automatic extensions so far; watcher only
}

func newLease() *lease {
	return &lease{lost: make(chan struct{}), nudge: make(chan struct{}, 1)}
}

func (l *lease) markLost(cause error) {
	l.lostOnce.Do(func() {
		l.cause = cause
		close(l.lost)
	})
}

// lostCause returns why the lease was lost, or nil.
func (l *lease) lostCause() error {
	select {
	case <-l.lost:
		return l.cause
	default:
		return nil
	}
}

// Lost returns a channel that is closed when the lock this Mutex holds is lost:
// at once when an extension (automatic or ExtendContext) or UnlockContext finds
// that a majority no longer holds its token, and otherwise before the validity
// ends, at Until minus a safety margin of TTL/10, if no extension has moved
// Until further by then (with WithAutoExtend: when renewals could not reach a
// majority in time). Work under the lock should select on it and stop.
//
// The channel belongs to the current acquisition: it is not closed by a
// normal UnlockContext, and the next acquisition gets a new one. Once closed
// it stays closed, and automatic renewals have stopped, even if a later
// ExtendContext succeeds: treat the loss as final and unlock. Before the
// first acquisition Lost returns a channel that is never closed. Without
// WithAutoExtend, the first call of Lost on a held lock starts the timer that
// closes the channel before the validity ends. LostCause says why.
func (m *Mutex) Lost() <-chan struct{} {
	if m == nil {
		return never
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil && !m.held {
		return never // no acquisition, or one released with no one watching
	}
	l := m.leaseLocked()
	if m.held && l.done == nil && !l.ending {
		m.watchLocked(false)
	}
	return l.lost
}

// leaseLocked returns the current acquisition's lease, creating it on first
// use: an acquisition nobody watches (no WithAutoExtend, no call of Lost)
// never needs one. m.mu must be held.
func (m *Mutex) leaseLocked() *lease {
	if m.lease == nil {
		m.lease = newLease()
	}
	return m.lease
}

// markLost records that the current acquisition was lost.
func (m *Mutex) markLost(cause error) {
	m.mu.Lock()
	l := m.leaseLocked()
	m.mu.Unlock()
	l.markLost(cause)
}

// LostCause returns why the current acquisition was lost, as an error that
// matches ErrLost and wraps the cause (ErrNotHeld when a majority no longer
// holds the token; ErrNodesUnavailable when renewals could not reach a majority
// before the validity ended), or nil if it was not lost.
func (m *Mutex) LostCause() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return nil
	}
	return m.lease.lostCause()
}

// watchLocked starts a watcher for the current lease: one that renews
// (WithAutoExtend) if renew, or one that only closes Lost before the validity
// ends. m.mu must be held, and no watcher of the lease may be running.
func (m *Mutex) watchLocked(renew bool) {
	l := m.leaseLocked()
	l.stop, l.done, l.ending, l.renew = make(chan struct{}), make(chan struct{}), false, renew
	go m.watch(l, l.stop, l.done, renew)
}

// endLease stops the current lease's watcher, if one runs, and waits for it
// to return; a renewal it had in flight has completed by then (it is bounded
// by the per-node timeout). It does not need the op slot: a watcher waiting
// for the slot gives up when stopped. It returns what resumeLease needs to
// put things back if the lease turns out not to end.
func (m *Mutex) endLease() (watched, renewing bool) {
	m.mu.Lock()
	l := m.lease
	var stop, done chan struct{}
	if l != nil {
		stop, done = l.stop, l.done
		l.ending = true
		select {
		case <-done:
		default:
			watched, renewing = done != nil, l.renew
		}
	}
	m.mu.Unlock()
	if done == nil {
		return watched, renewing
	}
	select {
	case <-stop:
	default:
		close(stop)
	}
	<-done
	return watched, renewing
}

// resumeLease undoes endLease for an UnlockContext that sent nothing: the
// acquisition goes on as before, watched and renewed as it was.
func (m *Mutex) resumeLease(watched, renewing bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.lease
	if l == nil {
		return
	}
	l.ending = false
	if watched && m.held && l.lostCause() == nil {
		m.watchLocked(renewing)
	}
}

// lossMargin is how long before the end of the validity Lost is closed if no
// extension came: TTL/10.
func (m *Mutex) lossMargin() time.Duration { return m.cfg.ttl / 10 }

// extendInterval is the time between the start of one automatic extension
// and the next: WithExtendInterval, or TTL/3.
func (m *Mutex) extendInterval() time.Duration { return intervalOf(m.cfg) }

// watch is a lease's watcher goroutine. It sleeps until the next renewal is
// due (if renew) or until the validity is about to end, whichever is first. A
// renewal takes the op slot like any call, so it never overlaps UnlockContext
// or ExtendContext, and its round is cut short at the loss deadline. A renewal
// that finds the token gone closes Lost at once; one that fails for want of
// nodes is retried (after a quarter of the time left, at most every TTL/100)
// until the validity's end minus the margin, when Lost is closed.
func (m *Mutex) watch(l *lease, stop, done chan struct{}, renew bool) {
	defer close(done)
	clk := m.set.Clock
	var retryAt time.Time // after a failed renewal
	for {
		m.mu.Lock()
		until, renewedAt := m.until, m.renewedAt
		m.mu.Unlock()
		if until.IsZero() {
			l.markLost(m.lostError(ErrNotHeld, "a majority no longer holds its token"))
			return
		}
		deadline := until.Add(-m.lossMargin())
		next, renewNow := deadline, false
		if renew && (m.cfg.maxExtends == 0 || l.renewed < m.cfg.maxExtends) {
			at := renewedAt.Add(m.extendInterval())
			if !retryAt.IsZero() {
				at = retryAt
			}
			if at.Before(deadline) {
				next, renewNow = at, true
			}
		}
		timer := clk.NewTimer(next.Sub(clk.Now()))
		select {
		case <-stop:
			timer.Stop()
			return
		case <-l.nudge:
			timer.Stop()
			retryAt = time.Time{}
			continue
		case <-timer.C():
		}
		select {
		case <-stop: // stopped while the timer fired: not a loss
			return
		default:
		}
		if !clk.Now().Before(deadline) {
			end := until.Format(time.RFC3339Nano)
			switch {
			case !renew:
				l.markLost(m.lostError(nil, "its validity ends at "+end+" and nothing extended it"))
			case m.cfg.maxExtends > 0 && l.renewed >= m.cfg.maxExtends:
				l.markLost(m.lostError(nil, fmt.Sprintf("its validity ends at %s after the %d automatic extensions WithMaxExtends allows", end, l.renewed)))
			case !retryAt.IsZero():
				l.markLost(m.lostError(ErrNodesUnavailable, "no extension reached a majority before the validity's end at "+end))
			default:
				l.markLost(m.lostError(nil, "its validity ends at "+end+" and no renewal ran in time: the process was paused or starved of CPU"))
			}
			return
		}
		if !renewNow {
			continue
		}
		// Another call (a manual ExtendContext against hanging nodes) may
		// hold the Mutex past the loss deadline: wait for it no longer.
		select {
		case m.op <- struct{}{}:
		default: // another call holds the Mutex
			switch m.awaitOp(l, stop, deadline, until) {
			case opGone:
				return
			case opNudged:
				retryAt = time.Time{}
				continue
			}
		}
		err := m.extend(context.Background(), deadline.Sub(clk.Now()))
		<-m.op
		switch {
		case err == nil:
			l.renewed++
			retryAt = time.Time{}
		case errors.Is(err, ErrNotHeld):
			l.markLost(m.lostError(err, ""))
			return
		default:
			// Too few nodes answered: retry after a quarter of the time left,
			// but not more often than every TTL/100.
			retryAt = clk.Now().Add(max(deadline.Sub(clk.Now())/4, m.cfg.ttl/100))
		}
	}
}

// opWait is how awaitOp ended.
type opWait int

const (
	opTaken  opWait = iota // the op slot is the watcher's
	opNudged               // the other call extended the lock: recompute
	opGone                 // stopped, or lost at the deadline
)

// awaitOp waits for the op slot, held by another call on this Mutex (a
// manual ExtendContext against hanging nodes, say), no longer than the loss
// deadline: if that comes first, the acquisition is reported lost, since no
// renewal can start before its validity ends.
func (m *Mutex) awaitOp(l *lease, stop <-chan struct{}, deadline, until time.Time) opWait {
	timer := m.set.Clock.NewTimer(deadline.Sub(m.set.Clock.Now()))
	defer timer.Stop()
	select {
	case m.op <- struct{}{}:
		return opTaken
	case <-stop:
		return opGone
	case <-l.nudge:
		return opNudged
	case <-timer.C():
		l.markLost(m.lostError(nil, "its validity ends at "+until.Format(time.RFC3339Nano)+
			" and no renewal could start before then: another call on this Mutex was still in progress"))
		return opGone
	}
}

// lostError is the LostCause of a lease: it matches ErrLost and wraps cause.
func (m *Mutex) lostError(cause error, detail string) error {
	msg := fmt.Sprintf("mutex: lock %q lost", m.name)
	if detail != "" {
		msg += ": " + detail
	}
	return &lostError{msg: msg, cause: cause}
}

type lostError struct {
	msg   string
	cause error
}

func (e *lostError) Error() string {
	if e.cause == nil {
		return e.msg
	}
	return e.msg + ": " + e.cause.Error()
}

func (e *lostError) Is(target error) bool { return target == ErrLost }
func (e *lostError) Unwrap() error        { return e.cause }
