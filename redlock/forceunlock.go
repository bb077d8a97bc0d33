package redlock

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/node"
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
// Inspect's (nothing is removed if the counter was not raised). It reads
// every node's counter before it raises any: if ctx ends first, nothing is
// removed, the error says how many nodes answered, and only the nodes that
// had not are failed (with a majority answered, the error matches ctx's,
// not mutex.ErrNodesUnavailable).
func (r *Redlock) ForceUnlock(ctx context.Context, name string) (*Eviction, error) {
	if err := r.checkAdmin(ctx, "force-unlock", name); err != nil {
		return nil, err
	}
	s := r.set
	ev := &Eviction{Name: name, Nodes: make([]NodeState, len(s.Nodes))}
	adv, err := s.AdvanceFence(ctx, name)
	for i, n := range s.Nodes {
		ev.Nodes[i] = NodeState{Node: n.Addr(), Fence: adv.Counters[i], Err: adv.Errs[i]}
	}
	if err != nil {
		return ev, err
	}
	ev.Fence = adv.Number
	targets := []engine.Target{{Key: s.KeyPrefix + name, Type: "string"}, {Key: s.KeyPrefix + name + rwSuffix, Type: "hash"}}
	var removals [][]engine.Removal
	var wg sync.WaitGroup
	wg.Go(func() { removals = s.Evict(ctx, targets, nil) }) // while the permits are searched for
	found, permits, permitRemovals := searchPermits(ctx, s, name, func(keys []string, want func(int) bool) [][]engine.Removal {
		return s.Evict(ctx, permitTargets(keys), want)
	}, func(err error) engine.Removal { return engine.Removal{Status: node.Absent, Err: err} })
	wg.Wait()
	targets, removals = append(targets, permitTargets(permits)...), append(removals, permitRemovals...)
	var short []string // keys too few nodes answered for
	for k, t := range targets {
		answered, removed := 0, false
		for i, rm := range removals[k] {
			ev.Nodes[i].Err = cmp.Or(ev.Nodes[i].Err, found[i].Err, rm.Err)
			if rm.Err == nil {
				answered++
				removed = removed || rm.Status == node.Evicted
			}
		}
		if removed {
			ev.Removed = append(ev.Removed, t.Key)
		}
		if answered < s.Need() {
			short = append(short, t.Key)
		}
	}
	if len(short) > 0 {
		errs := make([]error, len(ev.Nodes))
		for i, st := range ev.Nodes {
			errs[i] = st.Err
		}
		msg := fmt.Sprintf("redlock: force-unlock %q: fewer than a majority answered the removal of %s, which may still be held; retry",
			name, strings.Join(short, ", "))
		return ev, s.UnavailableError(ctx, msg, errs)
	}
	return ev, nil
}

// permitTargets are the permit keys as Evict's targets.
func permitTargets(keys []string) []engine.Target {
	targets := make([]engine.Target, len(keys))
	for k, key := range keys {
		targets[k] = engine.Target{Key: key, Type: "string"}
	}
	return targets
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
		fmt.Fprintf(&b, "%q: fencing counter raised to %d; no lock key to remove", ev.Name, ev.Fence)
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
