package redlock

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Eviction is what [Redlock.ForceUnlock] did.
type Eviction struct {
	Name string // the name unlocked
	// Fence is the number the fencing counter was raised to on a majority
	// before any key was removed: above every fencing token issued before
	// (on Cluster nodes, the counters of the slots of name's Mutex and
	// read-write lock keys were both raised to it).
	Fence   uint64
	Removed []string    // the lock keys removed from at least one node, in the order of Inspection.Locks
	Nodes   []NodeState // one per node; Fence is its counter after the raise
}

// ForceUnlock, for operators, removes every lock key of name (a Mutex's, a
// multi-name lock's for name alone, a read-write lock's, every permit of a
// Semaphore named name) from every node whatever token holds it, once the
// fencing counter is raised on a majority above every fencing token issued
// so far (Eviction.Fence; later holders get higher tokens). The evicted
// holder is not told: its Lost closes at its next renewal (cause matching
// mutex.ErrNotHeld), its release returns mutex.ErrNotHeld; until then it
// may act, and only a resource checking fencing tokens refuses it. Keys of
// another type are left alone. It costs Inspect's search. Errors are
// Inspect's; nothing is removed if the counter was not raised. If ctx ends
// while the counters are read, only the nodes yet to answer fail (with a
// majority answered, the error matches ctx's, not mutex.ErrNodesUnavailable).
func (r *Redlock) ForceUnlock(ctx context.Context, name string) (*Eviction, error) {
	if err := r.checkAdmin(ctx, "force-unlock", name); err != nil {
		return nil, err
	}
	s := r.set
	ev := &Eviction{Name: name, Nodes: make([]NodeState, len(s.Nodes))}
	for i, n := range s.Nodes {
		ev.Nodes[i].Node = n.Addr()
	}
	if err := advanceFence(ctx, s, ev); err != nil {
		return ev, err
	}
	searchErrs, keys, removals := searchPermits(ctx, s, name, []string{s.Keys.Prefix + name, s.Keys.Prefix + name + keyspace.RWSuffix}, evict)
	var short []string // keys too few nodes answered for
	errs := make([]error, len(ev.Nodes))
	for k, key := range keys {
		answered, removed := 0, false
		for i, rm := range removals[k] {
			ev.Nodes[i].Err = cmp.Or(ev.Nodes[i].Err, searchErrs[i], rm.Err)
			errs[i] = ev.Nodes[i].Err
			if rm.Err == nil {
				answered++
				removed = removed || rm.V == node.Evicted
			}
		}
		if removed {
			ev.Removed = append(ev.Removed, key)
		}
		if answered < s.Need() {
			short = append(short, key)
		}
	}
	if len(short) > 0 {
		msg := fmt.Sprintf("fewer than a majority answered the removal of %s, which may still be held; retry", strings.Join(short, ", "))
		return ev, s.UnavailableError(ctx, fmt.Sprintf("redlock: force-unlock %q", name), msg, errs)
	}
	return ev, nil
}

// advanceFence raises the fencing counter on a majority of the nodes above
// every fencing number issued before (found as docs/design.md, "Fencing
// tokens", finds one), recording the number in ev.Fence, and each node's
// counter (the larger of its two on Cluster nodes, where the counters of
// the slots of the Mutex's and read-write lock's keys are both raised) and
// latest failure in ev.Nodes. It fails when fewer than a majority answered
// the read or confirmed the raise, when too few counters can vouch and the
// clock is behind one, or when ctx ended before the raise was sent.
func advanceFence(ctx context.Context, s *engine.Set, ev *Eviction) error {
	key, at := s.Keys.Prefix+ev.Name, fmt.Sprintf("redlock: force-unlock %q", ev.Name)
	fences := []string{s.Keys.Fence(key)}
	if second := s.Keys.Fence(key + keyspace.RWSuffix); second != fences[0] {
		fences = append(fences, second)
	}
	var number uint64
	for _, fence := range fences {
		counters, errs := advance(ctx, s, ev, fence, "0")
		answered, seeded, highest := 0, 0, uint64(0)
		for i, c := range counters {
			if errs[i] == nil {
				answered, highest = answered+1, max(highest, c)
				if c > 0 {
					seeded++
				}
			}
		}
		msg := fmt.Sprintf("fencing counter read on %d of %d nodes", answered, len(s.Nodes))
		n, ok := s.FenceNumber(highest+1, highest, seeded)
		switch {
		case answered < s.Need():
			return s.UnavailableError(ctx, at, msg+", fewer than a majority; nothing removed", errs)
		case ctx.Err() != nil: // the nodes that answered did not fail
			return s.UnavailableError(ctx, at, msg+", but ctx ended before it was raised; nothing removed", errs)
		case !ok:
			return s.UnavailableError(ctx, at, fmt.Sprintf("only %d nodes hold the fencing counter (%d must), and the clock is behind it (%d); nothing removed",
				seeded, s.Need(), highest), errs)
		}
		number = max(number, n)
	}
	for _, fence := range fences {
		counters, errs := advance(ctx, s, ev, fence, number)
		confirmed := 0
		for i, c := range counters {
			if errs[i] == nil && c >= number {
				confirmed++
			}
		}
		if confirmed < s.Need() {
			return s.UnavailableError(ctx, at, fmt.Sprintf("fencing counter raised to %d on %d of %d nodes, fewer than a majority; nothing removed",
				number, confirmed, len(s.Nodes)), errs)
		}
	}
	ev.Fence = number
	return nil
}

// advance sends the advance script, for fenceKey with arg (the number to
// raise it to, "0" to read it), to every node, keeping in ev.Nodes each
// node's larger counter and its failure.
func advance(ctx context.Context, s *engine.Set, ev *Eviction, fenceKey string, arg any) ([]uint64, []error) {
	counters, errs := node.Each(ctx, s.Nodes, nil, func(ctx context.Context, n *node.Node) (uint64, error) {
		return node.Parse(n.Call(ctx, s.Timeout(timing.DefaultTTL), node.AdvanceScript, []string{fenceKey}, []any{arg}), node.ParseCounter)
	}, s.Errors.NodeFailure, nil)
	for i, c := range counters {
		ev.Nodes[i].Fence, ev.Nodes[i].Err = max(ev.Nodes[i].Fence, c), errs[i]
	}
	return counters, errs
}

// evict removes each lock key, in parallel, on the nodes want selects (nil:
// all) whatever its token, and tells the waiter first in its queue:
// removals[k][i] is keys[k] on node i. A key of another type than its
// lock's is left alone (node.OtherType). It leaves no tombstone: the
// evicted holder's release reports its lock lost.
func evict(ctx context.Context, s *engine.Set, keys []string, want func(int) bool) [][]answer[node.Eviction] {
	return eachKey(ctx, s, keys, want, (*node.Node).Call, node.EvictScript, func(key string) ([]string, []any) {
		queue, expiries := s.Keys.Queue(key)
		typ, channel := "string", "" // a Mutex's or a permit's; no notifications
		if strings.HasSuffix(key, keyspace.RWSuffix) {
			typ = "hash"
		}
		if s.Notify {
			channel = notify.Channel(key)
		}
		return []string{key, queue, expiries}, []any{typ, channel}
	}, node.ParseEviction)
}

// String returns what was done, with one line per node that failed.
func (ev *Eviction) String() string {
	if ev == nil {
		return "<nil eviction>"
	}
	var b strings.Builder
	switch {
	case ev.Fence == 0:
		fmt.Fprintf(&b, "%q: not unlocked: the fencing counter could not be raised on a majority; nothing removed", ev.Name)
	case len(ev.Removed) == 0:
		fmt.Fprintf(&b, "%q: fencing counter raised to %d; no lock key removed", ev.Name, ev.Fence)
	default:
		fmt.Fprintf(&b, "%q: fencing counter raised to %d; removed %s", ev.Name, ev.Fence, strings.Join(ev.Removed, ", "))
	}
	for _, n := range ev.Nodes {
		if n.Err != nil {
			fmt.Fprintf(&b, "\n  %s: failed: %v", n.Node, n.Err)
		}
	}
	return b.String()
}
