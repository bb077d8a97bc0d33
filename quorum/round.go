package quorum

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// ErrDeadline is the error recorded for every voter that had not answered when
// the deadline given to [Round.Decide] or [Round.Collect] fired.
var ErrDeadline = errors.New("quorum: no answer before the deadline")

// Reply is one voter's answer, as recorded by a Round.
type Reply[T any] struct {
	Node  int   // index of the voter, 0 <= Node < N
	Vote  Vote  // Yes, No or Failed
	Value T     // what the voter returned with its vote
	Err   error // why the voter failed; nil for Yes and No
}

// Round is one question sent to N voters in parallel. Start one with [Ask];
// read the outcome with Decide or Collect. A Round is owned by one goroutine:
// its methods are not safe for concurrent use.
type Round[T any] struct {
	g       errgroup.Group
	ask     func(node int) (Vote, T, error)
	next    atomic.Int32  // the next voter's index
	replies chan Reply[T] // buffered to N: no voter ever blocks on it
	tally   Tally
	votes   []Vote
	got     []Reply[T]

	// Storage for votes and got up to inline voters, so a round of a usual
	// size allocates them with the Round itself.
	votesBuf [inline]Vote
	gotBuf   [inline]Reply[T]
}

const inline = 7

// Ask starts ask(i) for every voter 0 <= i < n, each in its own goroutine, and
// returns at once. An ask function must return in bounded time; it may keep
// running after the round is decided (the Round does not wait for it unless
// [Round.Wait] is called); a late answer is counted if the Round is read
// again, unless a deadline already recorded that voter as Failed.
func Ask[T any](n int, ask func(node int) (Vote, T, error)) *Round[T] {
	r := &Round[T]{replies: make(chan Reply[T], n), tally: NewTally(n), ask: ask}
	if n <= inline {
		r.votes, r.got = r.votesBuf[:n], r.gotBuf[:0]
	} else {
		r.votes, r.got = make([]Vote, n), make([]Reply[T], 0, n)
	}
	voter := r.voter // one function value for all voters; each takes the next index
	for range n {
		r.g.Go(voter)
	}
	return r
}

// voter asks the next voter and sends its reply.
func (r *Round[T]) voter() error {
	i := int(r.next.Add(1)) - 1
	v, val, err := r.ask(i)
	if v != Yes && v != No {
		v = Failed
	}
	if v == Failed && err == nil {
		err = errors.New("quorum: voter failed without an error")
	}
	r.replies <- Reply[T]{Node: i, Vote: v, Value: val, Err: err}
	return nil
}

// Decide blocks until the round is decided (won or lost, see [Tally.Decided]),
// deadline fires, or ctx is done. It returns nil when decided, ErrDeadline when
// the deadline fired first (every voter still pending is then recorded as
// Failed with ErrDeadline, which may decide the round), or ctx.Err(). Replies
// that had already arrived are always counted before a deadline or ctx is
// honoured. A nil deadline never fires.
func (r *Round[T]) Decide(ctx context.Context, deadline <-chan time.Time) error {
	return r.wait(ctx, deadline, func() bool { return r.tally.Decided() })
}

// Collect is like Decide but waits for every voter's answer, not only for the
// decision.
func (r *Round[T]) Collect(ctx context.Context, deadline <-chan time.Time) error {
	return r.wait(ctx, deadline, func() bool { return r.tally.Pending() == 0 })
}

func (r *Round[T]) wait(ctx context.Context, deadline <-chan time.Time, done func() bool) error {
	for !done() {
		select {
		case rep := <-r.replies:
			r.record(rep)
			continue
		default:
		}
		select {
		case rep := <-r.replies:
			r.record(rep)
		case <-deadline:
			r.drain()
			if !done() {
				r.expire()
				return ErrDeadline
			}
		case <-ctx.Done():
			r.drain()
			if !done() {
				return ctx.Err()
			}
		}
	}
	return nil
}

// drain records every reply that has already arrived, without blocking.
func (r *Round[T]) drain() {
	for {
		select {
		case rep := <-r.replies:
			r.record(rep)
		default:
			return
		}
	}
}

func (r *Round[T]) record(rep Reply[T]) {
	if r.votes[rep.Node] != Pending {
		return // expired at the deadline; the late answer is not counted
	}
	r.votes[rep.Node] = rep.Vote
	r.tally.Add(rep.Vote)
	r.got = append(r.got, rep)
}

func (r *Round[T]) expire() {
	for i, v := range r.votes {
		if v == Pending {
			r.record(Reply[T]{Node: i, Vote: Failed, Err: ErrDeadline})
		}
	}
}

// Tally returns the votes counted so far.
func (r *Round[T]) Tally() Tally { return r.tally }

// Vote returns voter i's recorded vote; Pending if its answer has not been
// read yet.
func (r *Round[T]) Vote(i int) Vote { return r.votes[i] }

// Replies returns the answers recorded so far, in the order they were read.
// The slice is owned by the Round; do not modify it.
func (r *Round[T]) Replies() []Reply[T] { return r.got }

// Wait blocks until every ask function has returned. It does not record their
// answers; call Collect for that.
func (r *Round[T]) Wait() { _ = r.g.Wait() }
