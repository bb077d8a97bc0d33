package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/quorum"
)

// markers gathers the node markers an acquisition's answers show, for the
// restart quarantine: a node met for the first time whose marker was made
// after another node's lost its data since that one was made (see
// docs/design.md, "Restart quarantine"). An acquisition has one only with
// the quarantine on; a nil *markers records nothing.
type markers struct {
	mu      sync.Mutex
	left    int           // nodes not heard from yet
	oldest  string        // the maker of the marker made first among those heard; "" if none
	born    time.Time     // when, on the set's clock; zero: it does not say, so before any
	changed chan struct{} // closed and replaced whenever a node is heard from
}

func newMarkers(n int) *markers { return &markers{left: n, changed: make(chan struct{})} }

// heard records one node's marker and when it was made; marker is "" when
// the node showed none (it failed, or was not asked). Call it once per node.
func (m *markers) heard(marker string, born time.Time) {
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
// it: every node it reached made its marker with the same, followed by
// ":" and the node's time.
func madeBy(marker string) string {
	if i := strings.LastIndexByte(marker, ':'); i >= 0 {
		return marker[:i]
	}
	return marker
}

// olderThan blocks until a node has shown a marker that another acquisition
// than marker's made before born (older is true), or every node has been heard from without
// one (older is false), or wait fires first (known is false).
func (m *markers) olderThan(marker string, born time.Time, wait <-chan time.Time) (older, known bool) {
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

// inQuarantine says how many of the nodes that failed the attempt are in
// the restart quarantine, as " (n in restart quarantine)", or "" if none.
func (a *acquisition) inQuarantine() string {
	n := 0
	for _, rep := range a.round.Replies() {
		if rep.Vote == quorum.Failed && errors.Is(rep.Err, a.l.set.Errors.Quarantined) {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d in restart quarantine)", n)
}

// quarantined turns a node's vote into a failure while it is in quarantine.
func (a *acquisition) quarantined(i int, vote quorum.Vote, g grant, until time.Time) (quorum.Vote, grant, error) {
	s := a.l.set
	s.noteQuarantine(i, until)
	if g.Fence > 0 && s.Nodes[i].FenceStale(a.l.key) {
		g.Fence = 0 // its counter may be an old one restored from a snapshot: it does not vouch
	}
	if s.Clock.Now().Before(until) {
		return quorum.Failed, g, &quarantineError{until: until, err: s.Errors.Quarantined}
	}
	return vote, g, nil
}

// quarantineError says when a quarantined node will count again.
type quarantineError struct {
	until time.Time
	err   error
}

func (e *quarantineError) Error() string {
	return fmt.Sprintf("%v: it started or lost data recently, and counts again from %s", e.err, e.until.Format(time.RFC3339))
}

func (e *quarantineError) Unwrap() error { return e.err }
