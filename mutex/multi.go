package mutex

import (
	"slices"
	"strings"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// newMultiMutex returns a Mutex on every one of names at once: the
// constructor behind redlock.(*Redlock).NewMultiMutex (see
// internal/construct). Like NewMutex it sends nothing and never fails.
func newMultiMutex(set *engine.Set, names []string, opts ...Option) *Mutex {
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	t := target{name: strings.Join(sorted, " + "), names: sorted, kind: engine.MultiKind}
	var bad error
	switch {
	case len(names) == 0: // nil or empty: no names for build to use
		t, bad = target{}, invalid("mutex: multi-name lock of no names; give at least one")
	case len(names) > MaxNames:
		t, bad = target{}, invalid("mutex: multi-name lock of %d names, more than MaxNames (%d): its script would block every node", len(names), MaxNames)
	case len(names) == 1:
		t = target{name: names[0]} // one name: a Mutex like any other
	default:
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				bad = invalid("mutex: multi-name lock %q: name %q given twice", t.name, sorted[i])
				break
			}
		}
		if bad == nil && set != nil && set.Keys.Cluster {
			bad = sameSlot(set.Keys.Prefix, sorted)
		}
	}
	m := build(set, t, opts)
	if bad != nil { // what is wrong with the names, before what build saw
		m.err = bad
	}
	if m.err != nil {
		m.l = nil
	}
	return m
}

// sameSlot refuses names whose keys (prefix + name) a Redis Cluster would
// put in different hash slots: a script can only take keys of one slot, so
// every key must carry the same hash tag ("{acct}:7", "{acct}:3").
func sameSlot(prefix string, names []string) error {
	tag := keyspace.Tag(prefix + names[0])
	for _, name := range names[1:] {
		if tag == "" || keyspace.Tag(prefix+name) != tag {
			return invalid("mutex: multi-name lock on a Cluster: %q and %q may be in different hash slots; give every name the same hash tag, like {orders}:7", names[0], name)
		}
	}
	return nil
}
