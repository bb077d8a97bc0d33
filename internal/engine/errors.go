package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/node"
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

// ErrContended is matched by an attempt's error when other owners or
// callers held, queued for or split the votes on the lock: not the
// caller's own delays, not the nodes.
var ErrContended = errors.New("mutex: held or contended by others")

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
	return &OpError{msg: e.msg, is: append(slices.Clone(e.is), target), nodes: e.nodes}
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
		m = multierror.Append(m, s.Errors.NodeFailure(s.Nodes[rep.Node].Addr(), rep.Err))
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

// NodeFailure is a node's failure (in a round, or a node.Each) as the
// *NodeError of package mutex (Node), NodeTimeout when it did not answer in
// time; a call its ctx withdrew unsent (node.ErrNotSent) is no node's
// failure, and stays as it is.
func (e Errors) NodeFailure(addr string, err error) error {
	if errors.Is(err, node.ErrNotSent) {
		return err
	}
	if errors.Is(err, node.ErrTimeout) || errors.Is(err, round.ErrDeadline) {
		err = e.NodeTimeout
	}
	return e.Node(addr, err)
}

// UnavailableError is the error of an operator's call at (as `redlock: inspect
// "x"`) that too few nodes answered: at and msg, with the nodes' failures,
// joined with ctx's error if ctx ended. A call ctx cut short is no node's
// failure, as a round's pending voter is not: it is not among them. It
// matches NodesUnavailable unless the nodes that did not fail could have
// made a majority, had ctx not ended first. When ctx ended before any call
// was sent (every failure node.ErrNotSent), it is ctx's error alone, saying
// nothing was sent.
func (s *Set) UnavailableError(ctx context.Context, at, msg string, errs []error) error {
	e, cerr, failed, unsent := &OpError{msg: at + ": " + msg, is: []error{s.Errors.NodesUnavailable}}, ctx.Err(), 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, node.ErrNotSent):
			unsent++ // the node was not asked
		case cerr != nil && errors.Is(err, cerr):
		default:
			e.nodes = multierror.Append(e.nodes, err)
			e.nodes.ErrorFormat = oneLine
			failed++
		}
	}
	switch {
	case cerr == nil:
		return e
	case unsent == len(errs):
		return WithCtx(NewError(at+": nothing sent"), cerr)
	case len(s.Nodes)-failed >= s.Need():
		e.is = nil
	}
	return WithCtx(e, cerr)
}
