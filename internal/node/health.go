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

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// health is what the client knows of one node's restarts and data losses.
type health struct {
	mu      sync.Mutex
	known   bool      // first contact made
	marker  string    // the marker key's value last seen
	runID   string    // the node's run_id last seen (it changes at every start)
	until   time.Time // quarantined until then, on the client's clock
	why     string    // why, as Quarantine.Why
	infoErr error     // the last failure to read INFO, and when, so a node
	errAt   time.Time // that refuses INFO is not asked on every lock
	// suspect: a sign of a restart or data loss was seen (NOSCRIPT, a
	// changed marker) and INFO has not yet told which: until it does, the
	// node does not count, however many commands succeed on it meanwhile.
	suspect bool

	// fenceStale: since the node restarted or lost data, its fencing counter
	// may have gone back (a snapshot restores an old one); it does not vouch
	// for fencing numbers until one is written back to it.
	fenceStale bool
}

// healthOf returns what is known of the server holding key: the node's
// one health, or where markers are per slot (a Cluster node, or any node of
// a set with one) that of key's hash slot, whose marker key's value it remembers.
func (n *Node) healthOf(key string) *health {
	if n.cluster == nil && !n.perSlot {
		return &n.health
	}
	s := keyspace.Slot(key)
	n.shardsMu.Lock()
	defer n.shardsMu.Unlock()
	h := n.shards[s]
	if h == nil {
		if n.shards == nil {
			n.shards = map[int]*health{}
		}
		h = &health{}
		n.shards[s] = h
	}
	return h
}

// FenceStale reports whether the fencing counter key draws from on the node
// may have gone back since a restart or data loss that Quarantined detected.
func (n *Node) FenceStale(key string) bool {
	h := n.healthOf(key)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fenceStale
}

// FenceWritten records that a fencing number was written back to the node
// for key: its counter is current again.
func (n *Node) FenceWritten(key string) {
	h := n.healthOf(key)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fenceStale = false
}

// Signs is what a reply to the acquire script showed of a node's restarts
// and data losses.
type Signs struct {
	Key      string // the lock key the reply was about (its shard, on a Cluster node)
	Marker   string // the node's marker
	NoScript bool   // the node had lost this client's script cache (Result.NoScript)
	// Remade, if not zero, is when the node's marker was made, on the clock
	// Quarantined is given, where another node of the set shows an older
	// one: the node lost its data since. Only first contact reads it.
	Remade time.Time
}

// Met reports whether Quarantined has made first contact with the node (on
// a Cluster node, with the shard of key's slot).
func (n *Node) Met(key string) bool {
	h := n.healthOf(key)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.known
}

// Quarantine is a node's restart quarantine: until when (in the past when
// the node counts), and why.
type Quarantine struct {
	Until time.Time
	Why   string // what was seen, for errors: "it restarted or failed over (...)"
}

// QuarantineKnown is the part of Quarantined that needs no round trip: it
// records what seen says and returns the node's quarantine with ok, unless
// INFO must be read first (first contact, or a sign of a restart), in which
// case call Quarantined.
func (n *Node) QuarantineKnown(seen Signs) (q Quarantine, ok bool) {
	h := n.healthOf(seen.Key)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.knownLocked(seen)
}

// knownLocked is QuarantineKnown with h.mu held.
func (h *health) knownLocked(seen Signs) (q Quarantine, ok bool) {
	if h.known && (seen.Marker != h.marker || seen.NoScript) {
		h.suspect = true
	}
	return Quarantine{h.until, h.why}, h.known && !h.suspect
}

// Quarantined returns the node's quarantine: until when it must not count
// toward a majority (in the past when it counts), on the clock now reads. It asks
// the node INFO server only on first contact or after a sign of a restart
// (a changed marker, or seen.NoScript), never on every lock; on first
// contact, seen.Remade quarantines it too. The rules are in
// docs/design.md, "Restart quarantine". A failure to read INFO is returned,
// and again without asking for the next second; after a sign of a restart,
// every call fails so until INFO answers, never using what was known before.
func (n *Node) Quarantined(ctx context.Context, seen Signs, d time.Duration, now func() time.Time) (Quarantine, error) {
	h := n.healthOf(seen.Key)
	h.mu.Lock()
	defer h.mu.Unlock()
	markerChanged := h.known && seen.Marker != h.marker
	if q, ok := h.knownLocked(seen); ok {
		return q, nil
	}
	t := now()
	if h.infoErr != nil && t.Sub(h.errAt) < time.Second {
		return Quarantine{}, h.infoErr
	}
	uptime, runID, err := n.serverInfo(ctx, seen.Key)
	if err != nil {
		h.infoErr, h.errAt = err, t
		return Quarantine{}, err
	}
	h.infoErr, h.suspect = nil, false
	switch {
	case !h.known:
		h.until, h.why = t.Add(d-uptime), fmt.Sprintf("it started recently (up %v)", uptime)
		if !seen.Remade.IsZero() {
			if remade := seen.Remade.Add(d); remade.After(h.until) {
				h.until = remade
				h.why = "its restart marker was made after another node's: it lost its data since, was not reached when that one was made, or another process meeting the brand-new set at the same moment made it"
			}
			h.fenceStale = true
		}
	case runID != h.runID:
		h.until, h.why, h.fenceStale = t.Add(d), "it restarted or failed over (its run_id changed)", true
	case markerChanged:
		h.until, h.why, h.fenceStale = t.Add(d), "it lost its data (its restart marker changed)", true
	}
	h.known, h.marker, h.runID = true, seen.Marker, runID
	return Quarantine{h.until, h.why}, nil
}

// serverInfo asks the node its uptime and run_id (INFO server). On a
// Cluster node INFO runs in a script routed by key, so that it reaches the
// primary serving key's slot now (redirects followed), not the one the
// client's slot map may still name.
func (n *Node) serverInfo(ctx context.Context, key string) (uptime time.Duration, runID string, err error) {
	var text string
	if n.cluster != nil {
		cmd := routed(redis.NewCmd(ctx, "eval", "return redis.call('INFO', 'server')", 1, key))
		_ = n.cluster.Process(ctx, cmd)
		text, err = cmd.Text()
	} else if info, ok := n.client.(interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	}); ok {
		text, err = info.Info(ctx, "server").Result()
	} else {
		return 0, "", fmt.Errorf("node: client %T cannot run INFO, needed for the restart quarantine", n.client)
	}
	if err != nil {
		return 0, "", fmt.Errorf("node: reading INFO server for the restart quarantine: %w", err)
	}
	var secs int64 = -1
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "uptime_in_seconds:"); ok {
			secs, err = strconv.ParseInt(v, 10, 64)
			if err != nil || secs < 0 {
				return 0, "", fmt.Errorf("node: bad uptime_in_seconds %q in INFO server", v)
			}
		}
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			runID = v
		}
	}
	if secs < 0 || runID == "" {
		return 0, "", errors.New("node: INFO server lacks uptime_in_seconds or run_id, needed for the restart quarantine")
	}
	return time.Duration(secs) * time.Second, runID, nil
}

// Markers gathers the node markers that one acquisition's answers show, for
// the restart quarantine's comparison of nodes (docs/design.md, "Restart
// quarantine"). A nil *Markers records nothing.
type Markers struct {
	mu      sync.Mutex
	left    int           // nodes not heard from yet
	oldest  string        // the maker of the marker made first among those heard; "" if none
	born    time.Time     // when; zero: it does not say, so before any
	changed chan struct{} // closed and replaced whenever a node is heard from
}

// NewMarkers returns the Markers of an acquisition sent to n nodes.
func NewMarkers(n int) *Markers { return &Markers{left: n, changed: make(chan struct{})} }

// Heard records one node's marker and when it was made; marker is "" when
// the node showed none (it failed, or was not asked). Call it once per node.
func (m *Markers) Heard(marker string, born time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.left--
	if marker != "" && (m.oldest == "" || born.Before(m.born)) {
		m.oldest, m.born = madeBy(marker), born
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// madeBy returns the part of a marker that names the acquisition that made
// it, the same on every node it reached: all but ":" and the node's time.
func madeBy(marker string) string {
	if i := strings.LastIndexByte(marker, ':'); i >= 0 {
		return marker[:i]
	}
	return marker
}

// OlderThan blocks until a node has shown a marker that another acquisition
// than marker's made before born (older), or every node has been heard from
// without one (not older), or wait fires first (known is false).
func (m *Markers) OlderThan(marker string, born time.Time, wait <-chan time.Time) (older, known bool) {
	for {
		m.mu.Lock()
		older = m.oldest != "" && m.oldest != madeBy(marker) && m.born.Before(born)
		done, changed := older || m.left == 0, m.changed
		m.mu.Unlock()
		if done {
			return older, true
		}
		select {
		case <-changed:
		case <-wait:
			return false, false
		}
	}
}

// QuarantineObserver is told when a node enters and leaves its restart
// quarantine, with the node's address.
type QuarantineObserver interface {
	QuarantineEnter(addr string, until time.Time)
	QuarantineLeave(addr string)
}

// reported is what an observer was told of a node's quarantine.
type reported struct {
	mu     sync.Mutex // held while the observer is told, so that enter and leave stay in order
	closed bool       // by Close: nothing more is told
	until  time.Time
	timer  clock.Timer // fires at until, to tell the node left; nil: not in quarantine
}

// ReportQuarantine tells o, once, that the node entered a quarantine that
// ends at until (a later until moves the end), and that it left: when
// until has passed on the node's clock, or at Close. A until in the
// past ends a quarantine o was told of.
func (n *Node) ReportQuarantine(o QuarantineObserver, until time.Time) {
	r := &n.reported
	r.mu.Lock()
	defer r.mu.Unlock()
	now := n.clock.Now()
	switch {
	case r.closed:
	case until.After(now) && !until.Equal(r.until):
		if r.timer == nil {
			o.QuarantineEnter(n.addr, until)
		} else {
			r.timer.Stop()
		}
		r.until = until
		r.timer = n.clock.AfterFunc(until.Sub(now), func() { n.endReport(o, until, false) })
	case !until.After(now) && r.timer != nil:
		r.timer.Stop()
		r.timer = nil
		o.QuarantineLeave(n.addr)
	}
}

// endReport tells o that the node left its quarantine: the one ending at
// until, unless moved since, or, closing, any; closing, nothing is told after.
func (n *Node) endReport(o QuarantineObserver, until time.Time, closing bool) {
	r := &n.reported
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil && !r.closed && (closing || r.until.Equal(until)) {
		r.timer.Stop()
		r.timer = nil
		o.QuarantineLeave(n.addr)
	}
	r.closed = r.closed || closing
}
