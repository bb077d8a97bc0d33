package redlock

import (
	"crypto/tls"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Option configures a node set. Invalid values make New return an error; none
// is clamped.
type Option func(*config)

type config struct {
	keyPrefix   string
	driftFactor float64
	nodeTimeout time.Duration
	clock       clock.Clock
	quarantine  time.Duration
	noNotify    bool
	noHandoff   bool
	tls         *tls.Config // NewFromURLs only
	observer    *Observer
}

// configure returns the defaults with opts applied in order, nil ones skipped.
func configure(opts []Option) config {
	c := config{driftFactor: timing.DefaultDriftFactor, clock: clock.Real()}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	return c
}

// WithKeyPrefix puts prefix in front of every lock name to form its Redis key.
// Default "": the key is exactly the name.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.keyPrefix = prefix } }

// WithDriftFactor sets the share of each TTL kept back for clock drift between
// the client and the nodes: validity = ttl - elapsed - (ttl*f + 2ms). Default
// 0.01, as in the Redlock description. Must be in [0, 0.5).
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithNodeTimeout bounds how long each lock operation waits for any one node,
// counted from when its command left this process, whatever the clients'
// timeouts; a node that does not answer in time counts as failed for that
// round. Default 0: from the TTL and the nodes' round trips, 200ms on a LAN up
// to a 20s TTL (docs/design.md, "Per-node timeout"). Must be >= 0.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithClock sets the time source for validity arithmetic, per-node timeouts
// and retry sleeps. Default clock.Real(). Tests pass a *clock.Fake. Context
// deadlines always run on real time.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithRestartQuarantine keeps a node out of every majority for d after it
// restarted or lost its data: the delayed restart the Redlock description asks
// of operators, enforced by the client at no cost on an ordinary lock. Its
// votes fail with a *mutex.NodeError matching mutex.ErrQuarantined, and it
// vouches for no fencing number until one is written back to it. Nodes younger
// than d when first seen count too, so a fresh set refuses locks for d. A
// process's first lock attempt on the nodes (through any of its Redlocks
// with the same nodes and key prefix; on Cluster nodes, also each hash
// slot's first) runs alone: attempts begun meanwhile wait for it to end. d must
// be at least the largest TTL: a lock with a longer TTL is mutex.ErrInvalid,
// nothing sent; nodes with appendfsync always do not need it. Each node must
// answer INFO (a Cluster's shards are judged one by one, for the names of
// their slots). Default 0: off. See docs/design.md, "Restart quarantine".
func WithRestartQuarantine(d time.Duration) Option { return func(c *config) { c.quarantine = d } }

// WithoutNotifications turns off release notifications, by which a release
// wakes the next waiter in line over pub/sub (docs/design.md, "Waiting"). Use
// it when the nodes' ACL denies PUBLISH or SUBSCRIBE: waiters then rely on
// their backoff and on the holder's remaining TTL alone.
func WithoutNotifications() Option { return func(c *config) { c.noNotify = true } }

// WithoutLocalHandoff makes every UnlockContext release on the nodes. By
// default UnlockContext may pass the lock, without a round trip and within
// bounds, to a LockContext of this Redlock waiting on the same name with a
// Mutex of the same TTL and fencing setting (no metadata); the receiver gets
// the giver's token and Until (never later), its own larger fencing token, and
// Lost, Done and WithAutoExtend as for an acquisition. See docs/design.md,
// "Passing a lock within a process".
func WithoutLocalHandoff() Option { return func(c *config) { c.noHandoff = true } }
