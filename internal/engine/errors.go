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

// OpError is a failed operation's error: a summary, the sentinels it
// matches, and every node's failure (through errors.Is and errors.As).
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
	return &OpError{msg: e.msg, is: append(slices.Clone(e.is), target), nodes: e.nodes}
}

// WithCtx joins an operation's error with ctx's: errors.Is matches both.
func WithCtx(last, ctxErr error) error { return fmt.Errorf("%w: %w", last, ctxErr) }

// failed is the error of op's round that was not won (derr from Decide),
// nodes its failures: NotHeld when fewer than a majority can hold the token;
// ctx's joined when interrupted; neither sentinel when the nodes that did
// not fail could have made a majority (its time ran out); else NodesUnavailable.
func (l *Contender) failed(op string, t quorum.Tally, derr error, nodes *multierror.Error, notHeld, unavailable string) error {
	at, is := fmt.Sprintf("mutex: %s %q", op, l.spec.Name), l.set.Errors.NodesUnavailable
	switch {
	case t.Lost() && t.N-t.No < t.Need:
		at, is = at+": lock not held: "+notHeld, l.set.Errors.NotHeld
	case !t.Decided():
		return WithCtx(&OpError{msg: fmt.Sprintf("%s interrupted before a majority answered (%v)", at, t), nodes: nodes}, derr)
	case t.N-t.No-len(nodes.WrappedErrors()) >= t.Need:
		return &OpError{msg: fmt.Sprintf("%s: its time ran out before this process had sent its commands and read their answers: not counted as node failures (%v)", at, t), nodes: nodes}
	default:
		at += ": too few nodes answered" + unavailable
	}
	return &OpError{msg: fmt.Sprintf("%s (%v)", at, t), is: []error{is}, nodes: nodes}
}

// nodeErrors collects a round's failed replies, not those of nodes that did
// not fail (notFailed).
func nodeErrors[T any](s *Set, r *round.Round[T]) *multierror.Error {
	var m *multierror.Error
	for _, rep := range r.Replies() {
		if rep.Vote != quorum.Failed || notFailed(rep.Err) {
			continue
		}
		m = multierror.Append(m, s.Errors.NodeFailure(s.Nodes[rep.Node].Addr(), rep.Err))
		m.ErrorFormat = oneLine
	}
	return m
}

// notFailed reports whether a voter recorded Failed with err did not fail:
// its question was not sent, or the round's deadline came within its timeout.
func notFailed(err error) bool {
	return errors.Is(err, round.ErrNotSent) || errors.Is(err, round.ErrCutShort)
}

// oneLine formats node errors on one line, for logs.
func oneLine(errs []error) string {
	parts := make([]string, len(errs))
	for i, err := range errs {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// NodeFailure is a node's failure as a *mutex.NodeError (NodeTimeout when
// late); a call withdrawn unsent (node.ErrNotSent) stays as it is.
func (e Errors) NodeFailure(addr string, err error) error {
	if errors.Is(err, node.ErrNotSent) {
		return err
	}
	if errors.Is(err, node.ErrTimeout) || errors.Is(err, round.ErrDeadline) {
		err = e.NodeTimeout
	}
	return e.Node(addr, err)
}

// UnavailableError is the error of an operator's call at (`redlock: inspect
// "x"`) that too few nodes answered, joined with ctx's if ctx ended (calls it
// cut short are no node's failure). It matches NodesUnavailable unless the
// nodes that did not fail could have made a majority; nothing sent: ctx's alone.
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
