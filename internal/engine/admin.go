package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// What the operator's calls (package redlock's Inspect and ForceUnlock, an
// Election's Leader, an idempotency key's lookup) need of the engine.

// Each makes the node.Call on each node that want selects (nil: every one),
// in parallel, with timeout (0: that of a lock of the default TTL), and
// reads each answer with parse: values[i] or errs[i] is node i's, a failure
// (also a reply parse refuses) being the node's (Errors.Node), NodeTimeout
// when it did not answer in time; both zero on a node not selected.
func Each[T any](ctx context.Context, s *Set, want func(i int) bool, timeout time.Duration, script *node.Script, keys []string, args []any,
	parse func(node.Result) (T, error)) (values []T, errs []error) {
	if timeout == 0 {
		timeout = s.Timeout(timing.DefaultTTL)
	}
	values, errs = make([]T, len(s.Nodes)), make([]error, len(s.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.Nodes {
		if want != nil && !want(i) {
			continue
		}
		wg.Go(func() {
			r := n.Call(ctx, timeout, script, keys, args)
			err := r.Err
			if err == nil {
				values[i], err = parse(r)
			}
			if errors.Is(err, node.ErrTimeout) {
				err = s.Errors.NodeTimeout
			}
			if err != nil {
				errs[i] = s.Errors.Node(n.Addr(), err)
			}
		})
	}
	wg.Wait()
	return values, errs
}

// EvictCall is the evict script's keys for a lock key (the key, its queue
// and its queue's expiries) and arguments (the key's type: "hash" for a
// read-write lock's, else "string"; its release channel, "" without
// notifications).
func (s *Set) EvictCall(key string) ([]string, []any) {
	typ, channel := "string", ""
	if strings.HasSuffix(key, RWSuffix) {
		typ = "hash"
	}
	if s.Notify {
		channel = notify.Channel(key)
	}
	return []string{key, s.Beside(key, auxInfix+auxQueue), s.Beside(key, auxInfix+auxExpiries)}, []any{typ, channel}
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
