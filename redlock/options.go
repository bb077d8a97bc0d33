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
