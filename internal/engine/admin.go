package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// The operator's calls behind package redlock's Inspect and ForceUnlock:
// reads of any key, a search for keys by pattern, the advance of the
// fencing counter and the removal of lock keys whatever their token. Each
// goes to every node in parallel and waits for each node at most the
// per-node timeout of a lock of the default TTL after its command left.

// KeyRead is what one node held in one key, or why it could not tell.
type KeyRead struct {
	node.Peek
	Err error // the node's failure (see Errors.Node); nil when it answered
}

// Read reads each key on every node (want(i), if want is not nil): reads[k][i]
// is keys[k] on node i; zero on a node not wanted. A node that has not
// answered when ctx ends fails with ctx's error.
func (s *Set) Read(ctx context.Context, keys []string, want func(i int) bool) [][]KeyRead {
	timeout := s.adminTimeout()
	fans := make([]*fanout[node.Peek], len(keys))
	for k, key := range keys {
		fans[k] = send(s, timeout, skipStalled, want, node.PeekScript, newKeyset(key), nil, answered(node.ParsePeek))
	}
	return collectEach(ctx, s, fans, func(p node.Peek, err error) KeyRead { return KeyRead{Peek: p, Err: err} })
}

// Found is what a search found on one node.
type Found struct {
	Keys     []string // the matching keys, each once, in the order found
	Searched bool     // false for a node that is not one server (see node.MultiKey)
	Err      error    // the node's failure; Keys then holds what it found before
}

// scanCount is how many keys one step of a search looks at on a node.
const scanCount = 1000

// maxScanSteps bounds the steps of a search on one node: ten billion keys.
const maxScanSteps = 10_000_000

// Scan searches every node that is one server for the keys matching
// pattern, with SCAN, one round trip per scanCount keys of the node, until
// every node is done or ctx ends. A Cluster or Ring node is not searched:
// SCAN would reach one of its shards. then, if not nil, is called with node
// i and its keys as soon as its search succeeds, so that the next step on a
// node need not wait for a slower node's search.
func (s *Set) Scan(ctx context.Context, pattern string, then func(i int, keys []string)) []Found {
	timeout := s.adminTimeout()
	found := make([]Found, len(s.Nodes))
	var wg sync.WaitGroup
	for i, n := range s.Nodes {
		if !n.MultiKey() {
			continue
		}
		found[i].Searched = true
		wg.Go(func() {
			seen := map[string]bool{}
			cursor := "0"
			for range maxScanSteps {
				f := send(s, timeout, skipStalled, func(j int) bool { return j == i }, node.ScanScript, keyset{},
					[]any{cursor, pattern, scanCount}, answered(func(v any) ([]string, error) {
						next, keys, err := node.ParseScan(v)
						return append(keys, next), err // the cursor last
					}))
				values, errs := collect(ctx, s, f)
				if errs[i] != nil {
					found[i].Err = errs[i]
					return
				}
				keys := values[i]
				for _, key := range keys[:len(keys)-1] {
					if !seen[key] {
						seen[key] = true
						found[i].Keys = append(found[i].Keys, key)
					}
				}
				if cursor = keys[len(keys)-1]; cursor == "0" {
					if then != nil {
						then(i, found[i].Keys)
					}
					return
				}
			}
			found[i].Err = s.Errors.Node(n.Addr(), fmt.Errorf("the search for %q did not end after %d steps", pattern, maxScanSteps))
		})
	}
	wg.Wait()
	return found
}

// Advance is the outcome of AdvanceFence.
type Advance struct {
	Number   uint64   // the number the counter was raised to; 0 if none
	Counters []uint64 // per node, its counter as last read; 0 if missing or failed
	Errs     []error  // per node, its failure in the latest step; nil when it answered
}

// AdvanceFence raises the set's fencing counter on a majority of the nodes,
// for a forced unlock of name, above every fencing number issued before
// (found as docs/design.md, "Fencing tokens", finds one). It fails, as
// UnavailableError says, when fewer than a majority answered or confirmed,
// when too few counters can vouch and the clock is behind one, or when ctx
// ended before the raise was sent (Errs then holds the read's failures). On
// Cluster nodes it reads the counters of the slots of name's Mutex and
// read-write lock keys, then raises both to one Number; Counters are the
// larger of each node's two.
func (s *Set) AdvanceFence(ctx context.Context, name string) (Advance, error) {
	key := s.KeyPrefix + name
	fences := []string{s.FenceKeyOf(key)}
	if second := s.FenceKeyOf(key + RWSuffix); second != fences[0] {
		fences = append(fences, second)
	}
	var adv Advance
	for _, fence := range fences {
		number, err := s.readFence(ctx, name, fence, &adv)
		if err != nil {
			return adv, err
		}
		adv.Number = max(adv.Number, number)
	}
	for _, fence := range fences {
		if err := s.raiseFence(ctx, name, fence, &adv); err != nil {
			return adv, err
		}
	}
	return adv, nil
}

// readFence reads the counter at fenceKey on every node into adv (each
// node's larger) and returns the number a raise of it must reach.
func (s *Set) readFence(ctx context.Context, name, fenceKey string, adv *Advance) (uint64, error) {
	read := send(s, s.adminTimeout(), skipStalled, nil, node.AdvanceScript, newKeyset(fenceKey), []any{"0"}, answered(node.ParseCounter))
	counters, errs := collect(ctx, s, read)
	if adv.Counters == nil {
		adv.Counters = make([]uint64, len(counters))
	}
	adv.Errs = errs
	answered, seeded, highest := 0, 0, uint64(0)
	for i, c := range counters {
		if errs[i] == nil {
			answered++
			if c > 0 {
				seeded++
			}
			highest = max(highest, c)
			adv.Counters[i] = max(adv.Counters[i], c)
		}
	}
	need := s.Need()
	switch {
	case answered < need:
		return 0, s.UnavailableError(ctx, fmt.Sprintf("redlock: force-unlock %q: fencing counter read on %d of %d nodes, fewer than a majority; nothing removed", name, answered, len(s.Nodes)), errs)
	case ctx.Err() != nil: // the nodes that answered did not fail
		return 0, s.UnavailableError(ctx, fmt.Sprintf("redlock: force-unlock %q: fencing counter read on %d of %d nodes, but ctx ended before it was raised; nothing removed", name, answered, len(s.Nodes)), errs)
	}
	number, ok := fenceRule(s, highest+1, highest, seeded, need)
	if !ok {
		return 0, s.UnavailableError(ctx, fmt.Sprintf("redlock: force-unlock %q: only %d nodes hold the fencing counter (%d must), and the clock is behind it (%d); nothing removed", name, seeded, need, highest), errs)
	}
	return number, nil
}

// raiseFence raises the counter at fenceKey to adv.Number on every node,
// recording each node's answer in adv; it fails when fewer than a majority
// confirmed.
func (s *Set) raiseFence(ctx context.Context, name, fenceKey string, adv *Advance) error {
	raise := send(s, s.adminTimeout(), skipStalled, nil, node.AdvanceScript, newKeyset(fenceKey), []any{adv.Number}, answered(node.ParseCounter))
	counters, errs := collect(ctx, s, raise)
	confirmed := 0
	for i, c := range counters {
		if errs[i] == nil {
			adv.Counters[i] = max(adv.Counters[i], c)
			if c >= adv.Number {
				confirmed++
			}
		}
	}
	adv.Errs = errs // each node's latest answer tells its state
	if confirmed < s.Need() {
		return s.UnavailableError(ctx, fmt.Sprintf("redlock: force-unlock %q: fencing counter raised to %d on %d of %d nodes, fewer than a majority; nothing removed", name, adv.Number, confirmed, len(s.Nodes)), errs)
	}
	return nil
}

// Target is a lock to remove: its key (with the key prefix) and the Redis
// type the key has ("string", or "hash" for a read-write lock's).
type Target struct{ Key, Type string }

// Removal is what one node did with one lock key, or why it could not.
type Removal struct {
	Status node.Eviction
	Err    error // the node's failure; nil when it answered
}

// Evict removes each target's key on every node (want(i), if want is not
// nil) whatever its token, and tells the waiter first in its queue:
// removals[k][i] is targets[k] on node i; zero on a node not wanted. A key
// of another type is left alone (node.OtherType). It leaves no tombstone, so
// the evicted holder's release reports its lock lost.
func (s *Set) Evict(ctx context.Context, targets []Target, want func(i int) bool) [][]Removal {
	fans := make([]*fanout[node.Eviction], len(targets))
	for k, t := range targets {
		l := NewContender(s, Spec{Name: t.Key, Key: t.Key, TTL: timing.DefaultTTL})
		keys := newKeyset(l.releaseKeys.names[:3]...) // key, queue, expiries
		fans[k] = send(s, s.adminTimeout(), queueBehindStalled, want, node.EvictScript, keys, []any{t.Type, l.channel},
			answered(node.ParseEviction))
	}
	return collectEach(ctx, s, fans, func(e node.Eviction, err error) Removal { return Removal{Status: e, Err: err} })
}

// collectEach collects each of fans: out[k][i] is node i's answer to
// fans[k], as made by mk from collect's value and error.
func collectEach[T, R any](ctx context.Context, s *Set, fans []*fanout[T], mk func(T, error) R) [][]R {
	out := make([][]R, len(fans))
	for k, f := range fans {
		values, errs := collect(ctx, s, f)
		out[k] = make([]R, len(s.Nodes))
		for i := range s.Nodes {
			out[k][i] = mk(values[i], errs[i])
		}
	}
	return out
}

// adminTimeout is the per-node timeout of the operator's calls: that of a
// lock of the default TTL.
func (s *Set) adminTimeout() time.Duration { return s.Timeout(timing.DefaultTTL) }

// answered makes a fan-out's parse of a reply parser: a node's answer
// counts Yes, its failure or a malformed reply Failed.
func answered[T any](parse func(any) (T, error)) func(int, node.Result) (quorum.Vote, T, error) {
	return func(_ int, r node.Result) (quorum.Vote, T, error) {
		var v T
		err := r.Err
		if err == nil {
			v, err = parse(r.Reply)
		}
		if err != nil {
			return quorum.Failed, v, err
		}
		return quorum.Yes, v, nil
	}
}

// collect waits for every node's answer to f (each at most the per-node
// timeout after its command left) and returns them: values[i], or errs[i],
// node i's failure as Errors.Node makes it. If ctx ends first, the nodes
// still to answer fail with ctx's error, and commands not yet sent are
// withdrawn.
func collect[T any](ctx context.Context, s *Set, f *fanout[T]) (values []T, errs []error) {
	_ = f.round.Collect(ctx, nil)
	values, errs = make([]T, len(s.Nodes)), make([]error, len(s.Nodes))
	for i := range s.Nodes {
		if f.round.Vote(i) == quorum.Pending {
			f.cmds[i].Cancel()
			errs[i] = s.Errors.Node(s.Nodes[i].Addr(), ctx.Err())
		}
	}
	for _, rep := range f.round.Replies() {
		switch err := rep.Err; {
		case rep.Vote != quorum.Failed:
			values[rep.Node] = rep.Value
		case errors.Is(err, round.ErrDeadline), errors.Is(err, round.ErrNotSent):
			errs[rep.Node] = s.Errors.Node(s.Nodes[rep.Node].Addr(), s.Errors.NodeTimeout)
		default:
			errs[rep.Node] = s.Errors.Node(s.Nodes[rep.Node].Addr(), err)
		}
	}
	return values, errs
}

// UnavailableError is the error of an operator's call that too few nodes answered:
// msg, with the nodes' failures, joined with ctx's error if ctx ended. It
// matches NodesUnavailable unless the nodes that did not fail could have
// made a majority, had ctx not ended first: that is no node's failure.
func (s *Set) UnavailableError(ctx context.Context, msg string, errs []error) error {
	e := &OpError{msg: msg, is: []error{s.Errors.NodesUnavailable}}
	if cerr := ctx.Err(); cerr != nil {
		failed := 0
		for _, err := range errs {
			if err != nil && !errors.Is(err, cerr) {
				failed++
			}
		}
		if len(s.Nodes)-failed >= s.Need() {
			e.is = nil
		}
	}
	for _, err := range errs {
		if err != nil {
			e.nodes = multierror.Append(e.nodes, err)
		}
	}
	if e.nodes != nil {
		e.nodes.ErrorFormat = oneLine
	}
	if ctx.Err() != nil {
		return WithCtx(e, ctx.Err())
	}
	return e
}

// Reply is one node's answer to a script sent by Each.
type Reply struct {
	Value    any
	NoScript bool  // the node had lost its script cache (node.Result.NoScript)
	Err      error // the node's failure (see Errors.Node); nil when it answered
}

// Each sends script, with keys and args, to every node in parallel (a node
// that has stopped answering for longer than timeout is skipped and fails)
// and waits for each answer at most timeout after its command left, or
// until ctx ends: replies[i] is node i's.
func (s *Set) Each(ctx context.Context, timeout time.Duration, script *node.Script, keys []string, args []any) []Reply {
	f := send(s, timeout, skipStalled, nil, script, newKeyset(keys...), args,
		func(_ int, r node.Result) (quorum.Vote, node.Result, error) {
			if r.Err != nil {
				return quorum.Failed, r, r.Err
			}
			return quorum.Yes, r, nil
		})
	values, errs := collect(ctx, s, f)
	replies := make([]Reply, len(s.Nodes))
	for i := range replies {
		replies[i] = Reply{Value: values[i].Reply, NoScript: values[i].NoScript, Err: errs[i]}
	}
	return replies
}
