package redlock

import (
	"crypto/tls"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Option configures a node set. Invalid values make New return an error; none
// is clamped silently.
type Option func(*config)

type config struct {
	keyPrefix   string
	driftFactor float64
	nodeTimeout time.Duration
	clock       clock.Clock
	quarantine  time.Duration
	noNotify    bool
	tls         *tls.Config // NewFromURLs only
}

func defaultConfig() config {
	return config{driftFactor: timing.DefaultDriftFactor, clock: clock.Real()}
}

// WithKeyPrefix puts prefix in front of every lock name to form its Redis key.
// Default "": the key is exactly the name.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.keyPrefix = prefix } }

// WithDriftFactor sets the share of each TTL kept back for clock drift between
// the client and the nodes: validity = ttl - elapsed - (ttl*f + 2ms). Default
// 0.01, as in the Redlock description. Must be in [0, 0.5).
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithNodeTimeout bounds how long each lock operation waits for any one node's
// answer, counted from the moment its command left this process (time spent
// queued here is back-pressure, not a node failure), whatever timeouts the
// go-redis clients have. Default 0: the larger of the lock's TTL/100 and 8
// times the slowest node's usual round trip, within [200ms, 500ms] (200ms on
// a LAN up to a 20s TTL); under a 2s TTL the floor is TTL/10, at least 50ms.
// A node that does not answer in time counts as failed for that round; its
// command still completes in the background, bounded by the client's own
// read and write timeouts. Must be >= 0.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithClock sets the time source for validity arithmetic, per-node timeouts
// and retry sleeps. Default clock.Real(). Tests pass a *clock.Fake. Context
// deadlines always run on real time.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithRestartQuarantine keeps a node out of every majority for d after it
// restarted or lost its data: the "delayed restart" the Redlock description
// asks operators to configure, enforced by the client. A node restarted
// without persistence forgets the keys it granted, and one restored from a
// snapshot forgets the latest; counting it at once could let a second owner
// in (see docs/design.md).
//
// Detection does not rely on connection errors (go-redis reconnects without
// reporting one), and costs nothing on an ordinary lock:
//   - each node keeps a marker key without TTL that the acquire script reads
//     and recreates, with a fresh value, when missing: a node that lost its
//     data shows every client a changed marker;
//   - each node set runs its own copy of the acquire script, so the node's
//     NOSCRIPT answer tells this set that the node's script cache was emptied
//     since its last acquisition, which every restart does;
//   - on first contact, and after either sign, the client asks the node INFO
//     server. A changed run_id (a restart, even from a snapshot or an AOF, or
//     a failover) or marker quarantines the node for d from now; on first
//     contact it counts d after its start (from its uptime).
//
// A quarantined node's vote counts as a failure, a *mutex.NodeError matching
// mutex.ErrQuarantined; it also stops vouching for fencing numbers until one is
// written back to it. Each node must be a single Redis server that answers
// INFO (not miniredis, not a Cluster or Ring client: New refuses those). A
// fresh set of nodes refuses locks for d. Default 0: off. Must be >= 0; a good
// value is at least the largest TTL in use. Nodes running appendfsync always
// lose nothing in a restart and do not need it.
func WithRestartQuarantine(d time.Duration) Option { return func(c *config) { c.quarantine = d } }

// WithoutNotifications turns off release notifications. By default the
// release script tells the next owner in line, on its Redlock's channel
// "quorumlock:released:@<id>" of each node, that the lock is free, and a
// LockContext call that finds the lock held subscribes to it (one pub/sub
// connection per node and Redlock, shared by its waiters, closed 1s after
// the last) so it tries again as soon as it is its turn instead of sleeping
// out its backoff. Use this
// option when the nodes' ACL denies PUBLISH or SUBSCRIBE: waiters then rely
// on their backoff and on the holder's remaining TTL alone.
func WithoutNotifications() Option { return func(c *config) { c.noNotify = true } }
