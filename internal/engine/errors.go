package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// OpError is what a lock operation returns when it fails: a readable summary,
// the sentinel values it matches, and every node's failure. Callers see it
// only through errors.Is and errors.As.
type OpError struct {
	msg   string
	is    []error
	nodes *multierror.Error // nil when no node failed
}

// NewError returns an error with msg that matches every value of is.
func NewError(msg string, is ...error) *OpError { return &OpError{msg: msg, is: is} }

func (e *OpError) Error() string {
	if e.nodes == nil {
		return e.msg
	}
	return e.msg + ": " + e.nodes.Error()
}

func (e *OpError) Is(target error) bool { return slices.Contains(e.is, target) }

// Unwrap returns the *multierror.Error holding every node's failure, or nil.
func (e *OpError) Unwrap() error {
	if e.nodes == nil {
		return nil
	}
	return e.nodes
}

// Also returns a copy of e that matches target too.
func (e *OpError) Also(target error) *OpError {
	c := *e
	c.is = append(slices.Clone(e.is), target)
	return &c
}

// WithCtx joins an operation's error with the context's, so that errors.Is
// matches both ctx.Err() and the operation's cause.
func WithCtx(last, ctxErr error) error { return fmt.Errorf("%w: %w", last, ctxErr) }

// failed is the error of op (as "resume") on l's lock whose round, tallied
// t, was not won, with derr from its Decide: NotHeld, saying notHeld, when
// fewer than a majority can hold the token; ctx's error joined when the
// round was interrupted; otherwise NodesUnavailable, saying unavailable.
func (l *Contender) failed(op string, t quorum.Tally, derr error, nodes *multierror.Error, notHeld, unavailable string) error {
	at, is := fmt.Sprintf("mutex: %s %q", op, l.spec.Name), l.set.Errors.NodesUnavailable
	switch {
	case t.Lost() && t.N-t.No < t.Need:
		at, is = at+": lock not held: "+notHeld, l.set.Errors.NotHeld
	case !t.Decided():
		return WithCtx(&OpError{msg: fmt.Sprintf("%s interrupted before a majority answered (%v)", at, t), nodes: nodes}, derr)
	default:
		at += ": too few nodes answered" + unavailable
	}
	return &OpError{msg: fmt.Sprintf("%s (%v)", at, t), is: []error{is}, nodes: nodes}
}

// nodeErrors collects the failed replies of a round as the set's node
// errors; a voter left unsent (the client's backlog) is not reported.
func nodeErrors[T any](s *Set, r *round.Round[T]) *multierror.Error {
	var m *multierror.Error
	for _, rep := range r.Replies() {
		if rep.Vote != quorum.Failed || errors.Is(rep.Err, round.ErrNotSent) {
			continue
		}
		err := rep.Err
		if errors.Is(err, round.ErrDeadline) {
			err = s.Errors.NodeTimeout
		}
		m = multierror.Append(m, s.Errors.Node(s.Nodes[rep.Node].Addr(), err))
	}
	if m != nil {
		m.ErrorFormat = oneLine
	}
	return m
}

// oneLine formats node errors on one line, for logs.
func oneLine(errs []error) string {
	parts := make([]string, len(errs))
	for i, err := range errs {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// unsent counts the voters of a round recorded as never sent.
func unsent[T any](r *round.Round[T]) int {
	n := 0
	for _, rep := range r.Replies() {
		if errors.Is(rep.Err, round.ErrNotSent) {
			n++
		}
	}
	return n
}

// nodesFailed reports whether a lost acquire round is lost for want of
// nodes: fewer than a majority answered by its decision, the unsent counted
// as answered (docs/design.md, "Contention or outage").
func nodesFailed[T any](r *round.Round[T]) bool {
	t := r.Tally()
	return t.Unavailable() && t.Yes+t.No+unsent(r) < t.Need
}

// quarantined turns a node's vote into a failure while it is in the restart
// quarantine, until until, and tells the observer.
func (a *acquisition) quarantined(i int, vote quorum.Vote, g grant, until time.Time) (quorum.Vote, grant, error) {
	s := a.l.set
	if s.Observer != nil {
		s.Nodes[i].ReportQuarantine(s.Observer, until)
	}
	if g.Fence > 0 && s.Nodes[i].FenceStale(a.l.key) {
		g.Fence = 0 // its counter may be an old one restored from a snapshot: it does not vouch
	}
	if s.Clock.Now().Before(until) {
		return quorum.Failed, g, fmt.Errorf("%w: it started or lost data recently, and counts again from %s", s.Errors.Quarantined, until.Format(time.RFC3339))
	}
	return vote, g, nil
}

// inQuarantine says how many of the nodes that failed the attempt are in
// the restart quarantine, as " (n in restart quarantine)", or "" if none.
func (a *acquisition) inQuarantine() string {
	n := 0
	for _, rep := range a.round.Replies() {
		if rep.Vote == quorum.Failed && errors.Is(rep.Err, a.l.set.Errors.Quarantined) {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d in restart quarantine)", n)
}
