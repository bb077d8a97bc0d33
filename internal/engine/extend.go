package engine

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// Extend resets h's TTL where its key still holds its token (the Redlock
// spec's token-checked PEXPIRE) and moves Until; the caller holds the op
// slot. It waits at most the per-node timeout and ctx. Errors: NotHeld when
// fewer than a majority can hold the token or no validity is left (Lost
// closes); NodesUnavailable when too few answered, Until unchanged.
func (l *Contender) Extend(ctx context.Context, h *Hold) error {
	s := l.set
	if s.renewals().lapsed(h) {
		return NewError(fmt.Sprintf("mutex: extend %q: lock not held: nothing sent: %v", l.spec.Name, h.LostCause()), s.Errors.NotHeld, s.Errors.Lost)
	}
	b := sendBatch(s, nil, []*Hold{h}, s.Clock.Now())
	deadline, stop := timing.Timer(s.Clock, max(l.budget(b.start), 0))
	defer stop()
	err := b.collect(ctx, deadline)
	l.mu.Lock()
	suspect := h.suspect
	l.mu.Unlock()
	switch ls, t := &b.leases[0], b.leases[0].ext.tally(len(s.Nodes), suspect); {
	case ls.ok:
		s.renewals().rescheduled(h)
		return nil
	case ls.gone != "":
		err = &OpError{msg: fmt.Sprintf("mutex: extend %q: lock not held: %s (%v)", l.spec.Name, ls.gone, t),
			is: []error{s.Errors.NotHeld}, nodes: nodeErrors(s, b.round)}
		h.foundLost(l.lostErr(err, ""))
		return err
	case err == nil && s.renewals().lapsed(h) && h.LostCause() != nil: // the validity ended first (the deadline)
		return NewError(fmt.Sprintf("mutex: extend %q: lock not held: no majority confirmed the extension before the validity ended (%v): %v", l.spec.Name, t, h.LostCause()), s.Errors.NotHeld, s.Errors.Lost)
	default: // too few answers, or ctx ended first
		return l.failed("extend", t, err, nodeErrors(s, b.round), "", " to extend the lock")
	}
}

// extension is what one extension found, bit i for node i.
type extension struct {
	yes      uint64 // the key held the token and was extended
	restored uint64 // the key was missing and the token was put back
	gone     uint64 // the key was missing, or held by another token
	unknown  uint64 // no answer: failed, or still pending
	failed   uint64 // of those, the nodes that failed
}

// tally counts e as a round of n voters: Yes for the nodes that extended,
// but for suspect ones, whose Yes does not count ("Renewals put lost keys
// back"): No, as for those without the token.
func (e extension) tally(n int, suspect uint64) quorum.Tally {
	t := quorum.NewTally(n)
	t.Yes, t.No, t.Failed = bits.OnesCount64(e.yes&^suspect), bits.OnesCount64(e.restored|e.gone|e.yes&suspect), bits.OnesCount64(e.failed)
	return t
}

// extended records a won extension: the validity moves to until (never
// back), holders and suspects as "Renewals put lost keys back" says.
func (h *Hold) extended(start time.Time, lag time.Duration, until time.Time, e extension, restoreTo uint64) {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	if until.After(h.until) && !h.until.IsZero() {
		h.until, h.renewedAt, h.lag = until, start, lag
	}
	h.holders = e.yes | e.restored
	h.absent &^= h.holders
	h.suspect = h.suspect&^h.holders | restoreTo&e.unknown
}

// forget records an undecided extension: nodes without the token drop out,
// nodes sent a restore that restored or did not answer are suspect.
func (h *Hold) forget(e extension, restoreTo uint64) {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	h.holders &^= e.gone
	h.suspect |= restoreTo & (e.restored | e.unknown)
}
