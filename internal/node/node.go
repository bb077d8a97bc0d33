package node

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Client is what a node needs of its go-redis client: scripts, and pipelines
// to send many of them in one round trip. Every go-redis client has both.
type Client interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// Node is one independent Redis primary of a node set. It is safe for
// concurrent use.
type Node struct {
	client Client
	addr   string
	clock  clock.Clock
	// Multi-key scripts are sent only to clients that reach one server:
	// a Cluster or Ring client would split their keys across slots.
	multiKey bool
	health   health
	// A Cluster node's health is per hash slot (healthOf): each slot's
	// shard restarts and fails over on its own. So is a plain node's in a
	// set with a Cluster node (perSlot): it keeps a marker per slot too.
	cluster  *redis.ClusterClient
	perSlot  bool
	shardsMu sync.Mutex
	shards   map[int]*health
	reported reported // what an observer was told of its quarantine

	mu        sync.Mutex
	queue     []*Cmd    // waiting to be sent, in order
	spare     []*Cmd    // a drained queue's storage, for reuse
	sending   bool      // a sender goroutine runs
	busySince time.Time // when the first round trip not answered since was sent, on real time; zero if none
	results   []Result  // run's, reused from one round trip to the next (sender goroutine only)
	silent    bool      // every command of the last round trip timed out
	loaded    []*Script // scripts this node has cached, as far as we know
	later     []*Cmd    // to send once the node next answers (Later)
	hasLater  atomic.Bool
	probing   bool // a probe is due while commands wait for Later
	probes    int  // probes since the first of them waited
	closed    bool // by Close: nothing waits for Later, no probe is sent

	latency atomic.Int64          // smoothed round trip of a batch, in ns
	refusal atomic.Pointer[error] // the node's last refusal of an unauthenticated command, until it next answers
}

// New returns the node reached through client, named addr in errors. The
// departure times given to receivers are read on c; latency and stalls are
// measured on real time, since they are the network's.
func New(client Client, addr string, c clock.Clock) *Node {
	n := &Node{client: client, addr: addr, clock: c, multiKey: true}
	timing.WaitedToRun(time.Now(), math.MaxInt64) // from here on, the process's delays are seen (Stalled)
	switch c := client.(type) {
	case *redis.ClusterClient:
		n.multiKey, n.cluster = false, c
	case *redis.Ring:
		n.multiKey = false
	}
	return n
}

// MarkersPerSlot tells a plain node that its set keeps the restart marker
// per hash slot (keyspace.Layout.Cluster), as a Cluster node does; only before use.
func (n *Node) MarkersPerSlot() { n.perSlot = true }

// Addr returns the address the node is reported under.
func (n *Node) Addr() string { return n.addr }

// SetAddr changes the name the node is reported under; only before use.
func (n *Node) SetAddr(addr string) { n.addr = addr }

// Client returns the node's client.
func (n *Node) Client() Client { return n.client }

// MultiKey reports whether scripts over several unrelated keys can be sent
// to the node in one call.
func (n *Node) MultiKey() bool { return n.multiKey }

// Latency returns the smoothed round trip of the node's recent batches, or 0
// before the first.
func (n *Node) Latency() time.Duration { return time.Duration(n.latency.Load()) }

// Stalled returns, while commands to the node are queued or in flight, how
// long it has answered none (round trips that timed out do not end that), if
// that is more than d: the node (or the way to it) is not answering, and
// commands that may be skipped should not queue behind it. With excuse (but
// a renewal, which a majority decides, must not wait on one node): not while
// this process has, meanwhile, left a goroutine waiting d/4 to run (the
// silence may be its own), up to timing.Excuses(d) more d, on the real clock.
func (n *Node) Stalled(d time.Duration, excuse bool) (time.Duration, bool) {
	n.mu.Lock()
	since, busy := n.busySince, n.sending
	n.mu.Unlock()
	if !busy || since.IsZero() {
		return 0, false
	}
	waited := time.Since(since)
	excusable := excuse && n.clock == clock.Real() && waited <= time.Duration(timing.Excuses(d)+1)*d
	return waited, waited > d && !(excusable && timing.WaitedToRun(since, d/4))
}
