package redlock

import (
	"time"

	"github.com/quorumlock/quorumlock/clock"
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
}

func defaultConfig() config {
	return config{driftFactor: clock.DefaultDriftFactor, clock: clock.Real()}
}

// WithKeyPrefix puts prefix in front of every lock name to form its Redis key.
// Default "": the key is exactly the name.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.keyPrefix = prefix } }

// WithDriftFactor sets the share of each TTL kept back for clock drift between
// the client and the nodes: validity = ttl - elapsed - (ttl*f + 2ms). Default
// 0.01, as in the Redlock description. Must be in [0, 0.5).
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithNodeTimeout bounds how long each lock operation waits for any one node's
// answer, whatever timeouts the go-redis clients have. Default 0: derived from
// each lock's TTL as TTL/100, kept within [20ms, 500ms] (80ms for an 8s TTL).
// A node that does not answer in time counts as failed for that round; its
// command still completes in the background, bounded by the client's own read
// and write timeouts. Must be >= 0.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// WithClock sets the time source for validity arithmetic, per-node timeouts
// and retry sleeps. Default clock.Real(). Tests pass a *clock.Fake. Context
// deadlines always run on real time.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithRestartQuarantine keeps a node out of every majority until d has passed
// since it started: the "delayed restart" the Redlock description asks
// operators to configure, enforced by the client. A node restarted without
// persistence forgets the keys it granted; counting it at once could let a
// second owner in (see docs/design.md).
//
// Detection does not rely on connection errors (go-redis reconnects without
// reporting one): each node keeps a marker key without TTL that the acquire
// script reads, and recreates with a fresh value when it is missing, so the
// next acquisition by any client sees it changed. On first contact with a
// node, and whenever its marker changed, the client asks the node its uptime
// (INFO server), never on every lock. A quarantined node's vote counts as a
// failure, a *mutex.NodeError matching ErrQuarantined. Nodes that have been up
// for less than d when first seen are quarantined too. Default 0: off. Must
// be >= 0; a good value is at least the largest TTL in use.
func WithRestartQuarantine(d time.Duration) Option { return func(c *config) { c.quarantine = d } }
