package round

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/quorum"
)

var (
	// ErrDeadline is recorded for a voter that was asked but had not answered
	// within its timeout, or when the round's deadline fired.
	ErrDeadline = errors.New("quorum: no answer before the deadline")
	// ErrNotSent is recorded for a voter whose question was still waiting to
	// be sent when the round's deadline fired: the asker fell behind, the
	// voter did not fail.
	ErrNotSent = errors.New("quorum: question not sent before the deadline")
)

// Reply is one voter's answer, as recorded by a Round.
type Reply[T any] struct {
	Node  int         // index of the voter, 0 <= Node < N
	Vote  quorum.Vote // Yes, No or Failed
	Value T           // what the voter returned with its vote
	Err   error       // why the voter failed; nil for Yes and No
}

// Round is one question put to N voters in parallel. Make one with [New]
// and feed it with [Round.Sent] and [Round.Answer] from any goroutine; read
// the outcome with Decide or Collect. Decide, Collect and
// the readers are for one goroutine only.
//
// A voter's Sent and Answer each write the voter's own slot, then mark it
// written (state); the reader takes what is marked. The reader is woken
// (wake) only when it may have to act: when enough answers are in to
// settle what it waits for (wakeAt), or when a departure is not covered by
// the timer it sleeps with (armedAt), so a round of five voters decided by
// three answers wakes its reader once.
type Round[T any] struct {
	wake    chan struct{} // one slot: the reader has news
	voters  []voter[T]
	arrived atomic.Int32 // answers marked so far
	sends   atomic.Int32 // departures marked so far
	wakeAt  atomic.Int32 // an answer that brings arrived to this wakes the reader
	armedAt atomic.Int64 // when the reader's timer fires (UnixNano); 0: none

	clock   clock.Clock
	timeout time.Duration // per voter, from its Sent; 0: none
	stalled func(i int) bool
	tally   quorum.Tally
	got     []Reply[T]
}

// voter is one voter's part of a Round.
type voter[T any] struct {
	// written by Sent and Answer, read by the reader once marked in state
	state  atomic.Uint32
	sentAt time.Time
	inbox  Reply[T]
	// the reader's
	asked bool        // its departure was read
	vote  quorum.Vote // as recorded; Pending until then
}

// A voter's state: which of its Sent and Answer were claimed (the first
// call of each wins) and which are written.
const (
	sentClaimed uint32 = 1 << iota
	sentMarked
	answerClaimed
	answerMarked
)

// New returns a round of n voters. A voter asked (see [Round.Sent]) that
// has not answered within timeout on c counts as Failed with [ErrDeadline];
// a timeout of 0 (or a nil c) sets no such limit.
func New[T any](n int, c clock.Clock, timeout time.Duration) *Round[T] {
	r := &Round[T]{tally: quorum.NewTally(n), clock: c, timeout: timeout, wake: make(chan struct{}, 1),
		voters: make([]voter[T], n), got: make([]Reply[T], 0, n)}
	if c == nil {
		r.timeout = 0
	}
	return r
}

// Reset makes r a new round of as many voters, on c with timeout, as New
// would; WatchUnsent must be given again. Call it only when nothing reads
// r any more and no Sent or Answer of its old question can still come:
// whatever they would write goes to the new round.
func (r *Round[T]) Reset(c clock.Clock, timeout time.Duration) {
	clear(r.voters)
	clear(r.got)
	r.arrived.Store(0)
	r.sends.Store(0)
	r.wakeAt.Store(0)
	r.armedAt.Store(0)
	select {
	case <-r.wake:
	default:
	}
	r.clock, r.timeout, r.stalled = c, timeout, nil
	if c == nil {
		r.timeout = 0
	}
	r.tally, r.got = quorum.NewTally(len(r.voters)), r.got[:0]
}

// Voters returns the number of voters, n of New.
func (r *Round[T]) Voters() int { return len(r.voters) }

// WatchUnsent gives the round a way to tell, for a voter whose question has
// waited a whole timeout without being sent, whether it waits because the
// voter is stalled (stalled(i): it counts as Failed with ErrDeadline), rather
// than because the asker fell behind (it waits on). Call it before reading.
func (r *Round[T]) WatchUnsent(stalled func(i int) bool) { r.stalled = stalled }

// Sent records that voter i's question left at at: its timeout runs from
// then. Safe for concurrent use; a second call for a voter is ignored.
func (r *Round[T]) Sent(i int, at time.Time) {
	v := &r.voters[i]
	if v.state.Or(sentClaimed)&sentClaimed != 0 {
		return
	}
	v.sentAt = at
	v.state.Or(sentMarked)
	r.sends.Add(1)
	if r.timeout <= 0 {
		return // departures set no timer
	}
	if armed := r.armedAt.Load(); armed == 0 || armed > at.Add(r.timeout).UnixNano() {
		r.signal() // the reader's timer would fire too late for this voter
	}
}

// Answer records voter i's answer. A vote other than Yes or No counts as
// Failed (with a generic error if err is nil). Safe for concurrent use; a
// second call for a voter is ignored.
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
		r.signal()
	}
}

// signal wakes the reader, or leaves it a wake-up for its next wait.
func (r *Round[T]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Decide blocks until the round is decided (won or lost, see
// [quorum.Tally.Decided]), deadline fires, or ctx is done. It returns nil when decided, ErrDeadline when
// the deadline fired first (every voter still pending is then recorded as
// Failed, with ErrDeadline if it was asked and ErrNotSent if not, which may
// decide the round), or ctx.Err(). Answers that had already arrived are always
// counted before a deadline or ctx is honoured. A nil deadline never fires.
func (r *Round[T]) Decide(ctx context.Context, deadline <-chan time.Time) error {
	return r.wait(ctx, deadline, func() int {
		// Answers before a win (a majority of Yes) or a loss (too few
		// voters left to make one); the loss may take more to be decided.
		t := r.tally
		if t.Decided() {
			return 0
		}
		return max(1, min(t.Need-t.Yes, t.Pending()-(t.Need-t.Yes)+1))
	})
}

// Collect is like Decide but waits for every voter's answer, not only for the
// decision.
func (r *Round[T]) Collect(ctx context.Context, deadline <-chan time.Time) error {
	return r.wait(ctx, deadline, func() int { return r.tally.Pending() })
}

// Until is like Decide but waits until done reports true; done is called
// after the answers that have arrived are read, and after a [Round.Poke].
func (r *Round[T]) Until(ctx context.Context, deadline <-chan time.Time, done func() bool) error {
	return r.wait(ctx, deadline, func() int {
		if done() {
			return 0
		}
		return 1
	})
}

// Poke makes a waiting Until call done again. Safe for concurrent use.
func (r *Round[T]) Poke() { r.signal() }

// wait reads answers until more reports how many it still needs as 0, or
// the deadline, ctx or a voter's timeout ends the wait as Decide says. more
// must never report fewer answers than could end the wait (the reader
// sleeps until that many arrive), and may report more only by reporting 1.
func (r *Round[T]) wait(ctx context.Context, deadline <-chan time.Time, more func() int) error {
	var timer clock.Timer
	var timerAt time.Time // when the timer fires
	var checkAt time.Time // when to look at the voters not yet asked; zero if none
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		r.armedAt.Store(0)
	}()
	for {
		arrived, sends := r.drain()
		need := more()
		if need <= 0 {
			return nil
		}
		first := r.earliestSent()
		at := time.Time{}
		if !first.IsZero() {
			at = first.Add(r.timeout)
		}
		switch {
		case r.stalled == nil || !r.anyUnsent():
			checkAt = time.Time{}
		case checkAt.IsZero():
			checkAt = r.clock.Now().Add(r.timeout)
		}
		if !checkAt.IsZero() && (at.IsZero() || checkAt.Before(at)) {
			at = checkAt
		}
		// A timer already set to fire no later than at is kept: when it
		// fires early, the loop looks again and sets one for what is left.
		// (Voters answering one by one move at later; a new timer each
		// time would cost an allocation per answer.)
		if !at.IsZero() && (timer == nil || at.Before(timerAt)) {
			if timer != nil {
				timer.Stop()
			}
			timer, timerAt = r.clock.NewTimer(at.Sub(r.clock.Now())), at
		}
		var fired <-chan time.Time
		armed := int64(0)
		if timer != nil {
			fired, armed = timer.C(), timerAt.UnixNano()
		}
		// Tell the voters what wakes the reader, then look again for news
		// that came before they could know (see Sent and Answer).
		r.armedAt.Store(armed)
		r.wakeAt.Store(arrived + int32(need))
		if r.arrived.Load() >= arrived+int32(need) || r.sends.Load() != sends {
			continue
		}
		select {
		case <-r.wake:
		case <-fired:
			now := r.clock.Now()
			if now.Before(timerAt) {
				now = timerAt // the timer's word, on a clock whose Now lags its timers
			}
			timer, timerAt = nil, time.Time{}
			r.armedAt.Store(0)
			r.drain()
			if first := r.earliestSent(); !first.IsZero() && !first.Add(r.timeout).After(now) {
				// Every voter asked no later than the first one pending has
				// had its time.
				r.expireSentBy(first)
			}
			if !checkAt.IsZero() && !checkAt.After(now) {
				r.expireStalled()
				checkAt = time.Time{}
			}
		case <-deadline:
			r.drain()
			if more() > 0 {
				r.expireAll()
				return ErrDeadline
			}
		case <-ctx.Done():
			r.drain()
			if more() > 0 {
				return ctx.Err()
			}
		}
	}
}

// earliestSent returns the departure of the pending voter asked first, or
// the zero Time if no pending voter was asked or voters have no timeout.
func (r *Round[T]) earliestSent() time.Time {
	var first time.Time
	if r.timeout <= 0 {
		return first
	}
	for i := range r.voters {
		if v := &r.voters[i]; v.vote == quorum.Pending && v.asked && (first.IsZero() || v.sentAt.Before(first)) {
			first = v.sentAt
		}
	}
	return first
}

// expireSentBy records as Failed every pending voter asked at or before at.
func (r *Round[T]) expireSentBy(at time.Time) {
	for i := range r.voters {
		if v := &r.voters[i]; v.vote == quorum.Pending && v.asked && !v.sentAt.After(at) {
			r.record(Reply[T]{Node: i, Vote: quorum.Failed, Err: ErrDeadline})
		}
	}
}

// anyUnsent reports whether a pending voter has not been asked yet.
func (r *Round[T]) anyUnsent() bool {
	for i := range r.voters {
		if v := &r.voters[i]; v.vote == quorum.Pending && !v.asked {
			return true
		}
	}
	return false
}

// expireStalled records as Failed, with ErrDeadline, every pending voter not
// yet asked whose asker says it is stalled (see [Round.WatchUnsent]).
func (r *Round[T]) expireStalled() {
	for i := range r.voters {
		if v := &r.voters[i]; v.vote == quorum.Pending && !v.asked && r.stalled(i) {
			r.record(Reply[T]{Node: i, Vote: quorum.Failed, Err: ErrDeadline})
		}
	}
}

// drain records every departure and answer marked so far, without
// blocking. It returns the counts of answers and departures marked before
// it looked: each of them is recorded (later ones may be too).
func (r *Round[T]) drain() (arrived, sends int32) {
	arrived, sends = r.arrived.Load(), r.sends.Load()
	for i := range r.voters {
		v := &r.voters[i]
		st := v.state.Load()
		if st&sentMarked != 0 {
			v.asked = true
		}
		if st&answerMarked != 0 && v.vote == quorum.Pending {
			r.record(v.inbox)
		}
	}
	return arrived, sends
}

// record counts a voter's reply, unless the voter was already counted (an
// answer that came after the voter expired is not).
func (r *Round[T]) record(rep Reply[T]) {
	v := &r.voters[rep.Node]
	if v.vote != quorum.Pending {
		return
	}
	v.vote = rep.Vote
	r.tally.Add(rep.Vote)
	r.got = append(r.got, rep)
}

func (r *Round[T]) expireAll() {
	for i := range r.voters {
		v := &r.voters[i]
		if v.vote != quorum.Pending {
			continue
		}
		err := ErrDeadline
		if r.timeout > 0 && !v.asked {
			err = ErrNotSent
		}
		r.record(Reply[T]{Node: i, Vote: quorum.Failed, Err: err})
	}
}

// Tally returns the votes counted so far.
func (r *Round[T]) Tally() quorum.Tally { return r.tally }

// Vote returns voter i's recorded vote; Pending if its answer has not been
// read yet.
func (r *Round[T]) Vote(i int) quorum.Vote { return r.voters[i].vote }

// Replies returns the answers recorded so far, in the order they were read.
// The slice is owned by the Round; do not modify it.
func (r *Round[T]) Replies() []Reply[T] { return r.got }
