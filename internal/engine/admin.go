package engine

import (
	"context"
	"errors"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/node"
)

// What the operator's calls (package redlock's Inspect and ForceUnlock, an
// Election's Leader, an idempotency key's lookup) need of the engine.

// NodeFailure is a node's failure in a node.Each as the *NodeError of
// package mutex (Node), NodeTimeout when it did not answer in time.
func (e Errors) NodeFailure(addr string, err error) error {
	if errors.Is(err, node.ErrTimeout) {
		err = e.NodeTimeout
	}
	return e.Node(addr, err)
}

// QueueKeys are the keys kept beside a lock key for its waiters' queue and
// their expiries.
func (s *Set) QueueKeys(key string) (queue, expiries string) {
	return s.Beside(key, auxInfix+auxQueue), s.Beside(key, auxInfix+auxExpiries)
}

// FenceNumber is the number a forced unlock raises the fencing counter to,
// from the highest counter read and how many nodes hold one (seeded), as
// fenceRule decides; false when none can be trusted.
func (s *Set) FenceNumber(highest uint64, seeded int) (uint64, bool) {
	return fenceRule(s, highest+1, highest, seeded, s.Need())
}

// UnavailableError is the error of an operator's call that too few nodes answered:
// msg, with the nodes' failures, joined with ctx's error if ctx ended. It
// matches NodesUnavailable unless the nodes that did not fail could have
// made a majority, had ctx not ended first: that is no node's failure.
func (s *Set) UnavailableError(ctx context.Context, msg string, errs []error) error {
	e, cerr, failed := &OpError{msg: msg, is: []error{s.Errors.NodesUnavailable}}, ctx.Err(), 0
	for _, err := range errs {
		if err != nil {
			e.nodes = multierror.Append(e.nodes, err)
			if !errors.Is(err, cerr) {
				failed++
			}
		}
	}
	if e.nodes != nil {
		e.nodes.ErrorFormat = oneLine
	}
	if cerr == nil {
		return e
	}
	if len(s.Nodes)-failed >= s.Need() {
		e.is = nil
	}
	return WithCtx(e, cerr)
}
