package redlock

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/mutex"
)

// Redlock is a set of N independent Redis primaries that locks are taken on.
// It is safe for concurrent use, and any number of Mutexes may share it.
// [Redlock.Close] releases the locks still held and ends it. It does not own
// the clients given to New: closing them is the caller's job, after Close.
type Redlock struct {
	set   *engine.Set
	owned []redis.UniversalClient // made by NewFromURLs; closed by Close
	seeds []*redis.Client         // NewFromURLs's, one per seed of its Cluster URLs (pings, slot maps)
	races []*slotRace             // NewFromURLs's, one per Cluster URL
	pings sync.WaitGroup          // NewFromURLs's pings still out; Close waits

	closeOnce sync.Once
	closeErr  error
}

// New returns a node set over clients, one per independent Redis primary or
// Redis Cluster (not replicas of one another); a lock needs N/2+1 of them. It
// sends nothing, so unreachable nodes are never its error. It fails, matching
// mutex.ErrInvalid, only for no clients, a nil one, a *redis.Ring (it moves
// a held key to another shard when one fails, a loss nothing detects), one
// client or server address given twice (a Cluster client's seeds included),
// or an invalid option. Two names of one server or Cluster, and a plain
// client of a Cluster server, are found by NewFromURLs and Check, not here
// (docs/design.md, "Cluster nodes"). Close does not close the clients.
func New(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	cfg := configure(opts)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if len(clients) == 0 {
		return nil, invalid("redlock: no nodes given")
	}
	if len(clients) > maxNodes {
		return nil, invalid("redlock: %d nodes given; at most %d are supported", len(clients), maxNodes)
	}
	nodes := make([]*node.Node, len(clients))
	seen := make(map[string]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, invalid("redlock: node %d is a nil client", i)
		}
		for j := range i {
			if clients[j] == c {
				return nil, invalid("redlock: nodes %d and %d are the same client; each node must be a distinct Redis primary", j, i)
			}
		}
		if _, ring := c.(*redis.Ring); ring {
			return nil, invalid("redlock: node %d is a *redis.Ring: a Ring moves a held lock key to another shard when its shard fails, a data loss nothing can detect; give one Cluster (*redis.ClusterClient) or one server per node", i)
		}
		for _, addr := range addresses(c) {
			if j, dup := seen[addr]; dup && j != i {
				return nil, invalid("redlock: nodes %d and %d both connect to %s; each node must be a distinct Redis primary or Cluster", j, i, addr)
			}
			seen[addr] = i
		}
		nodes[i] = node.New(c, address(c, i), cfg.clock)
	}
	keys := keyspace.Layout{Prefix: cfg.keyPrefix, Cluster: slices.ContainsFunc(nodes, func(n *node.Node) bool { return !n.MultiKey() })}
	if keys.Cluster {
		for _, n := range nodes {
			n.MarkersPerSlot()
		}
	}
	return &Redlock{set: &engine.Set{
		Nodes:       nodes,
		Keys:        keys,
		DriftFactor: cfg.driftFactor,
		NodeTimeout: cfg.nodeTimeout,
		Clock:       cfg.clock,
		Quarantine:  cfg.quarantine,
		Notify:      !cfg.noNotify,
		Handoff:     !cfg.noHandoff,
		Errors:      engineErrors,
		Observer:    engineObserver(cfg.observer),
	}}, nil
}

// maxNodes is the most nodes a set may have.
const maxNodes = 64

// engineErrors are the values the engine's errors match.
var engineErrors = engine.Errors{
	NotObtained:      mutex.ErrNotObtained,
	Contended:        mutex.ErrContended,
	NodesUnavailable: mutex.ErrNodesUnavailable,
	NotHeld:          mutex.ErrNotHeld,
	Lost:             mutex.ErrLost,
	NodeTimeout:      mutex.ErrNodeTimeout,
	Quarantined:      mutex.ErrQuarantined,
	Closed:           mutex.ErrClosed,
	Node:             func(addr string, err error) error { return &mutex.NodeError{Node: addr, Err: err} },
}

// NewMutex returns a lock on name over this set's nodes. It sends nothing and
// never fails: an empty name or an invalid option is reported by every method
// of the Mutex as an error matching mutex.ErrInvalid. Mutexes are cheap; a
// Mutex may be reused for successive acquisitions of the same name.
func (r *Redlock) NewMutex(name string, opts ...mutex.Option) *mutex.Mutex {
	return newMutex(r.nodeSet(), name, opts...)
}

// NewElection returns a candidate in the election on name over this set's
// nodes: a Mutex on name (so it excludes Mutexes on the same name) with
// opts, WithAutoExtend, WithFencing and the leader's value as metadata. It
// sends nothing and never fails: a bad name or option is reported by every
// method as mutex.ErrInvalid.
func (r *Redlock) NewElection(name string, opts ...mutex.Option) *mutex.Election {
	return newElection(r.nodeSet(), name, opts...)
}

// NewRWMutex returns a read-write lock on name over this set's nodes: any
// number of readers or one writer; opts apply to both holds. It does not
// exclude a Mutex on the same name (their keys differ). It sends
// nothing and never fails: an empty name or an invalid option is reported by
// every call as mutex.ErrInvalid.
func (r *Redlock) NewRWMutex(name string, opts ...mutex.Option) *mutex.RWMutex {
	return newRWMutex(r.nodeSet(), name, opts...)
}

// NewMultiMutex returns one lock on all of names at once: each attempt takes
// every name's key or none, on each node, so two callers locking overlapping
// names in any order never deadlock, and each name excludes a Mutex on it.
// It behaves as one Mutex. On a Cluster node every name needs the same
// hash tag. It sends nothing and never fails: no names, more than
// mutex.MaxNames, an empty or duplicate name, or an invalid option is
// reported by every call as mutex.ErrInvalid.
func (r *Redlock) NewMultiMutex(names []string, opts ...mutex.Option) *mutex.Mutex {
	return newMultiMutex(r.nodeSet(), names, opts...)
}

// NewSemaphore returns a counting semaphore on name over this set's nodes,
// with at most limit permits held at once; opts apply to every permit. It
// sends nothing and never fails: a limit under 1, an empty or reserved name
// or an invalid option is reported by every call as mutex.ErrInvalid.
func (r *Redlock) NewSemaphore(name string, limit int, opts ...mutex.Option) *mutex.Semaphore {
	return newSemaphore(r.nodeSet(), name, limit, opts...)
}

// Nodes returns the addresses of the nodes, in the order given to New, as they
// appear in *mutex.NodeError; nil for a Redlock not made by New or NewFromURLs.
func (r *Redlock) Nodes() []string {
	if r == nil || r.set == nil {
		return nil
	}
	addrs := make([]string, len(r.set.Nodes))
	for i, n := range r.set.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Waiting returns how many calls of this process on this set wait for a
// release of the lock on name: a Mutex's LockContext, a multi-name lock's
// that includes name, an RWMutex's RLockContext or LockContext. A number that
// keeps growing means the lock is held longer than it is asked for. 0 for a
// Redlock not made by New or NewFromURLs.
func (r *Redlock) Waiting(name string) int {
	if r == nil || r.set == nil {
		return 0
	}
	key := r.set.Keys.Prefix + name
	return r.set.Hub().Waiting(notify.Channel(key)) + r.set.Hub().Waiting(notify.Channel(key+keyspace.RWSuffix))
}

// Quorum returns the number of nodes a lock needs: N/2+1; 0 for a Redlock
// not made by New or NewFromURLs.
func (r *Redlock) Quorum() int {
	if r == nil || r.set == nil {
		return 0
	}
	return r.set.Need()
}

func (c *config) check() error {
	if err := timing.CheckDriftFactor(c.driftFactor); err != nil {
		return invalid("redlock: %v", err)
	}
	if c.nodeTimeout < 0 {
		return invalid("redlock: negative node timeout %v", c.nodeTimeout)
	}
	if c.clock == nil {
		return invalid("redlock: nil clock")
	}
	if c.quarantine < 0 {
		return invalid("redlock: negative restart quarantine %v", c.quarantine)
	}
	return nil
}

// address names node i for errors: the client's address when it has exactly
// one; otherwise a name from its kind and position, or its seeds.
func address(c redis.UniversalClient, i int) string {
	switch c.(type) {
	case *redis.Client:
		if a := addresses(c); len(a) == 1 {
			return a[0]
		}
		return "failover#" + strconv.Itoa(i)
	case *redis.ClusterClient:
		return fmt.Sprintf("cluster%v", addresses(c))
	}
	return "node#" + strconv.Itoa(i)
}

// addresses returns the servers client c is given, which no other node of
// a set may be given: a client's one address, a Cluster client's seeds.
func addresses(c redis.UniversalClient) []string {
	switch c := c.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != "" && a != "FailoverClient" {
			return []string{a}
		}
	case *redis.ClusterClient:
		return c.Options().Addrs
	}
	return nil
}

// isNil reports whether c is nil or a typed nil pointer (a nil *redis.Client
// in a non-nil interface), which would panic on first use.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// usable refuses, sending nothing, an operator's call op that cannot run:
// on a nil or zero *Redlock or a nil ctx (mutex.ErrInvalid), or after Close (mutex.ErrClosed).
func (r *Redlock) usable(ctx context.Context, op string) error {
	switch {
	case r == nil:
		return invalid("redlock: %s on a nil *Redlock", op)
	case r.set == nil:
		return invalid("redlock: %s on a zero Redlock; create it with redlock.New or redlock.NewFromURLs", op)
	case ctx == nil:
		return invalid("redlock: %s: nil context.Context; pass context.Background() or one with a deadline", op)
	}
	return r.set.ErrIfClosed("redlock: %s: the node set was closed (Close); nothing sent", op)
}

// checkAdmin refuses, as usable does, an operator's call on name, and bad names.
func (r *Redlock) checkAdmin(ctx context.Context, op, name string) error {
	if err := r.usable(ctx, op); err != nil {
		return err
	}
	switch {
	case name == "":
		return invalid("redlock: %s: empty lock name", op)
	case len(r.set.Keys.Prefix)+len(name) > mutex.MaxNameLen:
		return invalid("redlock: %s: lock name of %d bytes (with key prefix) is longer than %d", op, len(r.set.Keys.Prefix)+len(name), mutex.MaxNameLen)
	case r.set.Keys.Reserved(name):
		return invalid("redlock: %s %q: the key is reserved for the library's own bookkeeping; give the name of the lock", op, name)
	}
	return nil
}

// invalid reports bad input, matching mutex.ErrInvalid.
func invalid(format string, args ...any) error {
	return engine.NewError(fmt.Sprintf(format, args...), mutex.ErrInvalid)
}
