package round

import (
	"context"
	"errors"
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

type event[T any] struct {
	poke  bool // a Poke, else:
	sent  bool // a Sent event, else an answer
	at    time.Time
	reply Reply[T]
}

// Round is one question put to N voters in parallel. Make one with [New]
// and feed it with [Round.Sent] and [Round.Answer] from any goroutine; read the outcome with Decide or Collect. Decide, Collect and
// the readers are for one goroutine only.
type Round[T any] struct {
	events  chan event[T] // buffered to 2N: Sent and Answer never block
	clock   clock.Clock
	timeout time.Duration // per voter, from its Sent; 0: none
	stalled func(i int) bool
	tally   quorum.Tally
	votes   []quorum.Vote
	sentAt  []time.Time
	got     []Reply[T]

	// Storage for a round of a usual size, allocated with the Round itself.
	votesBuf [inline]quorum.Vote
	sentBuf  [inline]time.Time
	gotBuf   [inline]Reply[T]
}

const inline = 7

// New returns a round of n voters. A voter asked (see [Round.Sent]) that
// has not answered within timeout on c counts as Failed with [ErrDeadline];
// a timeout of 0 (or a nil c) sets no such limit.
func New[T any](n int, c clock.Clock, timeout time.Duration) *Round[T] {
	r := &Round[T]{tally: quorum.NewTally(n), clock: c, timeout: timeout}
	if c == nil {
		r.timeout = 0
	}
	if n <= inline {
		r.votes, r.sentAt, r.got = r.votesBuf[:n], r.sentBuf[:n], r.gotBuf[:0]
	} else {
		r.votes, r.sentAt, r.got = make([]quorum.Vote, n), make([]time.Time, n), make([]Reply[T], 0, n)
	}
	r.events = make(chan event[T], 2*n)
	return r
}

// WatchUnsent gives the round a way to tell, for a voter whose question has
// waited a whole timeout without being sent, whether it waits because the
// voter is stalled (stalled(i): it counts as Failed with ErrDeadline), rather
// than because the asker fell behind (it waits on). Call it before reading.
func (r *Round[T]) WatchUnsent(stalled func(i int) bool) { r.stalled = stalled }

// Sent records that voter i's question left at at: its timeout runs from
// then. Safe for concurrent use; call it at most once per voter.
func (r *Round[T]) Sent(i int, at time.Time) {
	r.events <- event[T]{sent: true, at: at, reply: Reply[T]{Node: i}}
}

// Answer records voter i's answer. A vote other than Yes or No counts as
// Failed (with a generic error if err is nil). Safe for concurrent use; call
// it at most once per voter.
func (r *Round[T]) Answer(i int, v quorum.Vote, value T, err error) {
	if v != quorum.Yes && v != quorum.No {
		v = quorum.Failed
		if err == nil {
			err = errors.New("quorum: voter failed without an error")
		}
	}
	r.events <- event[T]{reply: Reply[T]{Node: i, Vote: v, Value: value, Err: err}}
}

// Decide blocks until the round is decided (won or lost, see
// [quorum.Tally.Decided]), deadline fires, or ctx is done. It returns nil when decided, ErrDeadline when
// the deadline fired first (every voter still pending is then recorded as
// Failed, with ErrDeadline if it was asked and ErrNotSent if not, which may
// decide the round), or ctx.Err(). Answers that had already arrived are always
// counted before a deadline or ctx is honoured. A nil deadline never fires.
func (r *Round[T]) Decide(ctx context.Context, deadline <-chan time.Time) error {
	return r.Until(ctx, deadline, func() bool { return r.tally.Decided() })
}

// Collect is like Decide but waits for every voter's answer, not only for the
// decision.
func (r *Round[T]) Collect(ctx context.Context, deadline <-chan time.Time) error {
	return r.Until(ctx, deadline, func() bool { return r.tally.Pending() == 0 })
}

// Until is like Decide but waits until done reports true; done is called
// after the answers that have arrived are read, and after a [Round.Poke].
func (r *Round[T]) Until(ctx context.Context, deadline <-chan time.Time, done func() bool) error {
	var timer clock.Timer
	var timerAt time.Time // when the timer fires
	var checkAt time.Time // when to look at the voters not yet asked; zero if none
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.drain()
		if done() {
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
		if timer != nil {
			fired = timer.C()
		}
		select {
		case e := <-r.events:
			r.record(e)
		case <-fired:
			now := r.clock.Now()
			if now.Before(timerAt) {
				now = timerAt // the timer's word, on a clock whose Now lags its timers
			}
			timer, timerAt = nil, time.Time{}
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
			if !done() {
				r.expireAll()
				return ErrDeadline
			}
		case <-ctx.Done():
			r.drain()
			if !done() {
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
	for i, v := range r.votes {
		if at := r.sentAt[i]; v == quorum.Pending && !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// expireSentBy records as Failed every pending voter asked at or before at.
func (r *Round[T]) expireSentBy(at time.Time) {
	for i, v := range r.votes {
		if v == quorum.Pending && !r.sentAt[i].IsZero() && !r.sentAt[i].After(at) {
			r.record(event[T]{reply: Reply[T]{Node: i, Vote: quorum.Failed, Err: ErrDeadline}})
		}
	}
}

// anyUnsent reports whether a pending voter has not been asked yet.
func (r *Round[T]) anyUnsent() bool {
	for i, v := range r.votes {
		if v == quorum.Pending && r.sentAt[i].IsZero() {
			return true
		}
	}
	return false
}

// expireStalled records as Failed, with ErrDeadline, every pending voter not
// yet asked whose asker says it is stalled (see [Round.WatchUnsent]).
func (r *Round[T]) expireStalled() {
	for i, v := range r.votes {
		if v == quorum.Pending && r.sentAt[i].IsZero() && r.stalled(i) {
			r.record(event[T]{reply: Reply[T]{Node: i, Vote: quorum.Failed, Err: ErrDeadline}})
		}
	}
}

// drain records every event that has already arrived, without blocking.
func (r *Round[T]) drain() {
	for {
		select {
		case e := <-r.events:
			r.record(e)
		default:
			return
		}
	}
}

// Poke makes a waiting Until call done again. Safe for concurrent use.
func (r *Round[T]) Poke() {
	select {
	case r.events <- event[T]{poke: true}:
	default: // the buffer is full: Until has answers to read anyway
	}
}

func (r *Round[T]) record(e event[T]) {
	if e.poke {
		return
	}
	i := e.reply.Node
	if e.sent {
		if r.sentAt[i].IsZero() {
			r.sentAt[i] = e.at
		}
		return
	}
	if r.votes[i] != quorum.Pending {
		return // expired at a deadline; the late answer is not counted
	}
	r.votes[i] = e.reply.Vote
	r.tally.Add(e.reply.Vote)
	r.got = append(r.got, e.reply)
}

func (r *Round[T]) expireAll() {
	for i, v := range r.votes {
		if v != quorum.Pending {
			continue
		}
		err := ErrDeadline
		if r.timeout > 0 && r.sentAt[i].IsZero() {
			err = ErrNotSent
		}
		r.record(event[T]{reply: Reply[T]{Node: i, Vote: quorum.Failed, Err: err}})
	}
}

// Tally returns the votes counted so far.
func (r *Round[T]) Tally() quorum.Tally { return r.tally }

// Vote returns voter i's recorded vote; Pending if its answer has not been
// read yet.
func (r *Round[T]) Vote(i int) quorum.Vote { return r.votes[i] }

// Replies returns the answers recorded so far, in the order they were read.
// The slice is owned by the Round; do not modify it.
func (r *Round[T]) Replies() []Reply[T] { return r.got }
