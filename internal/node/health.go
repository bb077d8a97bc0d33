package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrQuarantined is the failure recorded for a node in restart quarantine: it
// started (or lost its data) less than the set's quarantine ago, so it may
// have forgotten keys it granted, and it does not count toward a majority.
var ErrQuarantined = errors.New("node: in restart quarantine")

// health is what the client knows of one node's restarts: the marker key it
// last saw there, and when the node started. A node restarted without
// persistence comes back without its marker; the acquire script recreates it
// with a fresh value, so the next acquisition of every client sees a marker
// that changed, even though go-redis reconnected without reporting an error.
type health struct {
	mu      sync.Mutex
	marker  string    // last marker seen; "" before first contact
	started time.Time // the node's start, from its uptime, on the client's clock
}

// Started returns when the node started, on the clock now comes from. On
// first contact, and whenever marker differs from the one seen last, it asks
// the node for its uptime (INFO server), and only then: never on every lock.
// The uptime has whole seconds, so the start it derives is up to a second
// late, which only lengthens a quarantine.
func (n *Node) Started(ctx context.Context, marker string, now func() time.Time) (time.Time, error) {
	h := &n.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.marker == marker && marker != "" {
		return h.started, nil
	}
	info, ok := n.client.(interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	})
	if !ok {
		return time.Time{}, fmt.Errorf("node: client %T cannot run INFO, needed to learn the node's uptime", n.client)
	}
	text, err := info.Info(ctx, "server").Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("node: reading uptime: %w", err)
	}
	uptime, err := uptimeOf(text)
	if err != nil {
		return time.Time{}, err
	}
	h.marker, h.started = marker, now().Add(-uptime)
	return h.started, nil
}

// uptimeOf reads uptime_in_seconds from an INFO server reply.
func uptimeOf(info string) (time.Duration, error) {
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:")
		if !ok {
			continue
		}
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs < 0 {
			return 0, fmt.Errorf("node: bad uptime_in_seconds %q in INFO server", v)
		}
		return time.Duration(secs) * time.Second, nil
	}
	return 0, errors.New("node: no uptime_in_seconds in INFO server")
}
