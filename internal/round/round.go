package round

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

var (
	// ErrDeadline is recorded for a voter asked that did not answer within
	// its timeout or the round's deadline.
	ErrDeadline = errors.New("quorum: no answer before the deadline")
	// ErrNotSent is recorded for a voter not yet asked when the round's
	// deadline fired: the asker fell behind, the voter did not fail.
	ErrNotSent = errors.New("quorum: question not sent before the deadline")
	// ErrCutShort is recorded for a voter asked whose timeout had not run
	// out when the round's deadline fired: the round ended first, the voter
	// did not fail.
	ErrCutShort = errors.New("quorum: no answer before the round's deadline, which came within the voter's timeout")
	// ErrStopped is what a wait returns when the round's stop channel
	// (StopOn) closed first; the voters still pending stay pending.
	ErrStopped = errors.New("quorum: round stopped (its node set is closing)")
)

// Reply is one voter's answer, as recorded by a Round.
type Reply[T any] struct {
	Node  int         // index of the voter, 0 <= Node < N
	Vote  quorum.Vote // Yes, No or Failed
	Value T           // what the voter returned with its vote
	Err   error       // why the voter failed; nil for Yes and No
}

// Round is one question put to N voters in parallel (docs/design.md,
// "Acquire", step 3): Sent and Answer from any goroutine, the rest from one.
type Round[T any] struct {
	wake    chan struct{} // one slot: the reader has news
	voters  []voter[T]
	arrived atomic.Int32 // answers marked so far
	wakeAt  atomic.Int32 // an answer that brings arrived to this wakes the reader
	armedAt atomic.Int64 // when the sleeping reader's timer fires (UnixNano); 0: none, or awake

	clock     clock.Clock
	timeout   time.Duration // per voter, from its Sent; 0: none
	stalled   func(i int) bool
	excusable func(i int) bool // nil: every voter (ExcuseOnly)
	stop      <-chan struct{}  // StopOn's; nil: never
	tally     quorum.Tally
	got       []Reply[T]
}

// voter: Sent and Answer write sentAt and inbox, then mark them in state.
type voter[T any] struct {
	state   atomic.Uint32
	sentAt  time.Time
	inbox   Reply[T]
	vote    quorum.Vote // as recorded; Pending until then
	excused int         // timeouts added for this process's delays (timing.Excuses at most)
}

func (v *voter[T]) asked() bool { return v.state.Load()&sentMarked != 0 }

// A voter's state: Sent and Answer claimed (the first call of each wins), and written.
const (
	sentClaimed uint32 = 1 << iota
	sentMarked
	answerClaimed
	answerMarked
)

// New returns a round of n voters. One asked without an answer within
// timeout on c fails with [ErrDeadline] (excused a few more timeouts while
// this process is slow to run goroutines: docs/design.md, "Per-node
// timeout"), and so does one unsent for a timeout if stalled(i) says so
// (nil: never). A timeout of 0 sets no limit (and c may then be nil).
func New[T any](n int, c clock.Clock, timeout time.Duration, stalled func(i int) bool) *Round[T] {
	r := &Round[T]{wake: make(chan struct{}, 1), voters: make([]voter[T], n), got: make([]Reply[T], 0, n), stalled: stalled}
	r.Reset(c, timeout)
	return r
}

// Reset makes r a new round, as New would, once nothing of its old one can still come.
func (r *Round[T]) Reset(c clock.Clock, timeout time.Duration) {
	clear(r.voters)
	clear(r.got)
	select {
	case <-r.wake:
	default:
	}
	*r = Round[T]{wake: r.wake, voters: r.voters, got: r.got[:0], clock: c, timeout: timeout, stalled: r.stalled, tally: quorum.NewTally(len(r.voters))}
}

// Sent records that voter i's question left at at, starting its timeout;
// a second call for a voter is ignored.
func (r *Round[T]) Sent(i int, at time.Time) {
	v := &r.voters[i]
	if v.state.Or(sentClaimed)&sentClaimed != 0 {
		return
	}
	v.sentAt = at
	v.state.Or(sentMarked)
	if armed := r.armedAt.Load(); r.timeout > 0 && (armed == 0 || armed > at.Add(r.timeout).UnixNano()) {
		r.Poke() // the reader's timer fires too late for this voter
	}
}

// Answer records voter i's answer; a vote other than Yes or No counts as
// Failed. A second call for a voter is ignored.
func (r *Round[T]) Answer(i int, v quorum.Vote, value T, err error) {
	if v != quorum.Yes && v != quorum.No {
		v = quorum.Failed
		if err == nil {
			err = errors.New("quorum: voter failed without an error")
		}
	}
	w := &r.voters[i]
	if w.state.Or(answerClaimed)&answerClaimed != 0 {
		return
	}
	w.inbox = Reply[T]{Node: i, Vote: v, Value: value, Err: err}
	w.state.Or(answerMarked)
	if r.arrived.Add(1) >= r.wakeAt.Load() {
		r.Poke()
	}
}

// Decide blocks until the round is decided ([quorum.Tally.Decided]), then
// returns nil; or until deadline (nil: never) fires, then records every voter
// still pending as Failed (ErrDeadline; ErrNotSent if not asked, ErrCutShort
// if asked within its timeout, as of the time deadline sent) and
// returns ErrDeadline; or until ctx is done: ctx.Err(). Answers arrived are
// counted first.
func (r *Round[T]) Decide(ctx context.Context, deadline <-chan time.Time) error {
	return r.wait(ctx, deadline, func() int {
		// Answers before a win, or a loss (which may take more).
		t := r.tally
		if t.Decided() {
			return 0
		}
		return max(1, min(t.Need-t.Yes, t.Pending()-(t.Need-t.Yes)+1))
	})
}

// Collect is Decide waiting for every voter's answer.
func (r *Round[T]) Collect(ctx context.Context, deadline <-chan time.Time) error {
	return r.wait(ctx, deadline, func() int { return r.tally.Pending() })
}

// Until is Decide waiting until done, called after the answers arrived are
// read and after a [Round.Poke], reports true.
func (r *Round[T]) Until(ctx context.Context, deadline <-chan time.Time, done func() bool) error {
	return r.wait(ctx, deadline, func() int {
		if done() {
			return 0
		}
		return 1
	})
}

// ExcuseOnly gives more time for this process's delays (New) only to the
// voters excusable reports (docs/design.md, "Per-node timeout").
func (r *Round[T]) ExcuseOnly(excusable func(i int) bool) { r.excusable = excusable }

// StopOn makes every later wait end, returning ErrStopped, once stop is
// closed, unless the answers in end it; until the next Reset.
func (r *Round[T]) StopOn(stop <-chan struct{}) { r.stop = stop }

// Poke wakes the reader, or leaves it a wake-up for its next wait: a waiting
// Until calls done again. Safe for concurrent use.
func (r *Round[T]) Poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// wait reads answers until more needs 0 more, or ends as Decide says. more
// never reports fewer answers than could end the wait, nor more than 1 beyond.
func (r *Round[T]) wait(ctx context.Context, deadline <-chan time.Time, more func() int) error {
	var timer clock.Timer
	var timerAt time.Time // when the timer fires
	var checkAt time.Time // when to look at the voters not yet asked; zero if none
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.armedAt.Store(0)
		r.wakeAt.Store(0)
		arrived := r.drain()
		need := more()
		if need <= 0 {
			return nil
		}
		at, unsent := r.pending()
		switch {
		case r.stalled == nil || !unsent:
			checkAt = time.Time{}
		case checkAt.IsZero():
			checkAt = r.clock.Now().Add(r.timeout)
		}
		if !checkAt.IsZero() && (at.IsZero() || checkAt.Before(at)) {
			at = checkAt
		}
		// A timer due no later than at is kept: firing early, it is set again.
		if !at.IsZero() && (timer == nil || at.Before(timerAt)) {
			if timer != nil {
				timer.Stop()
			}
			timer, timerAt = r.clock.NewTimer(at.Sub(r.clock.Now())), at
		}
		var fired <-chan time.Time
		if timer != nil {
			fired = timer.C()
			r.armedAt.Store(timerAt.UnixNano())
		}
		r.wakeAt.Store(arrived + int32(need))
		select {
		case <-r.wake:
		case <-fired: // timerAt has passed (even on a clock whose Now lags its timers)
			timer = nil
			r.drain()
			stalled := !checkAt.IsZero() && !checkAt.After(timerAt)
			if stalled {
				checkAt = time.Time{}
			}
			slow := 0 // 1: this process left goroutines waiting to run meanwhile (timing.WaitedToRun)
			r.expire(func(i int, v *voter[T]) error {
				switch {
				case v.asked() && r.timeout > 0 && !v.sentAt.Add(r.timeout).After(timerAt):
					if slow == 0 {
						slow = 2 // the process's delays are real time: a round on another clock is not excused
						if r.clock == clock.Real() && timing.WaitedToRun(time.Now().Add(-r.timeout), r.timeout/4) {
							slow = 1
						}
					}
					if slow == 1 && v.excused < timing.Excuses(r.timeout) && (r.excusable == nil || r.excusable(i)) { // the answer may be here, unread: one more timeout
						v.sentAt, v.excused = timerAt, v.excused+1
						return nil
					}
					return ErrDeadline
				case !v.asked() && stalled && r.stalled(i):
					return ErrDeadline
				}
				return nil
			})
		case at := <-deadline:
			r.drain()
			if more() > 0 {
				if at.IsZero() && r.timeout > 0 {
					at = r.clock.Now()
				}
				r.expire(func(_ int, v *voter[T]) error {
					switch {
					case r.timeout == 0:
						return ErrDeadline
					case !v.asked():
						return ErrNotSent
					case v.sentAt.Add(r.timeout).After(at):
						return ErrCutShort
					}
					return ErrDeadline
				})
				return ErrDeadline
			}
		case <-ctx.Done():
			r.drain()
			if more() > 0 {
				return ctx.Err()
			}
		case <-r.stop:
			r.drain()
			if more() > 0 {
				return ErrStopped
			}
		}
	}
}

// pending returns when the first pending voter's timeout ends (zero: none),
// and whether a pending voter was not asked yet.
func (r *Round[T]) pending() (due time.Time, unsent bool) {
	for i := range r.voters {
		v := &r.voters[i]
		switch {
		case v.vote != quorum.Pending:
		case !v.asked():
			unsent = true
		case r.timeout > 0 && (due.IsZero() || v.sentAt.Add(r.timeout).Before(due)):
			due = v.sentAt.Add(r.timeout)
		}
	}
	return due, unsent
}

// expire records as Failed every pending voter failure gives an error.
func (r *Round[T]) expire(failure func(i int, v *voter[T]) error) {
	for i := range r.voters {
		if v := &r.voters[i]; v.vote == quorum.Pending {
			if err := failure(i, v); err != nil {
				r.record(Reply[T]{Node: i, Vote: quorum.Failed, Err: err})
			}
		}
	}
}

// drain records the answers marked, and returns how many were before it looked.
func (r *Round[T]) drain() (arrived int32) {
	arrived = r.arrived.Load()
	for i := range r.voters {
		if v := &r.voters[i]; v.vote == quorum.Pending && v.state.Load()&answerMarked != 0 {
			r.record(v.inbox)
		}
	}
	return arrived
}

// record counts the reply of a voter still pending.
func (r *Round[T]) record(rep Reply[T]) {
	r.voters[rep.Node].vote = rep.Vote
	r.tally.Add(rep.Vote)
	r.got = append(r.got, rep)
}

// Tally returns the votes counted so far.
func (r *Round[T]) Tally() quorum.Tally { return r.tally }

// Vote returns voter i's recorded vote; Pending until its answer is read.
func (r *Round[T]) Vote(i int) quorum.Vote { return r.voters[i].vote }

// Replies returns the answers recorded so far, in the order read; the slice
// is the Round's, not to be modified.
func (r *Round[T]) Replies() []Reply[T] { return r.got }
