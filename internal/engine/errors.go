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
func WithCtx(last, ctxErr error) error {
	return fmt.Errorf("%w: %w", last, ctxErr)
}

// nodeErrors collects the failed replies of a round as the set's node
// errors. A voter left unsent is the client's backlog, not a failure of the
// node, and is not reported.
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

// unsent counts the voters of a round recorded as never sent: the client
// fell behind, not the nodes.
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
// nodes: fewer than a majority of the nodes answered when the round was
// decided (counting as answered the nodes the client did not send to in
// time: that is its backlog, not theirs). When a majority answered, the
// round was lost to other owners or waiters, even if some nodes failed too
// (a split vote with one node of three down: yes=1 no=1 failed=1): the lock
// is contended, not unavailable.
func nodesFailed[T any](r *round.Round[T]) bool {
	t := r.Tally()
	return t.Unavailable() && t.Yes+t.No+unsent(r) < t.Need
}

// stalledError is the failure recorded, without sending anything, for a node
// that has not answered a command for longer than the per-node timeout.
type stalledError struct{ waited time.Duration }

func (e *stalledError) Error() string {
	return fmt.Sprintf("the node has not answered a command sent %v ago; this one was not sent", e.waited.Round(time.Millisecond))
}
