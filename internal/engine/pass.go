package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Bounds on passing a lock within the process (docs/design.md, "Bounds").
const (
	maxPasses  = 8                    // in a row
	passWindow = 5 * time.Millisecond // since the acquisition from the nodes
)

// heir is an Acquire of more than one try that may receive a lock passed in-process.
type heir struct {
	l      *Contender
	id     string          // its place's id in the nodes' queues, or ""
	ticket int64           // when the call began, in µs: the oldest goes first
	done   <-chan struct{} // its ctx's
	local  atomic.Bool     // it waits for a pass without a place in the nodes' queues
	got    chan *Hold      // buffered: the acquisition passed to it
	nudge  chan struct{}   // buffered: look at the nodes now
}

// cohort is, per key, the heirs waiting and the passable acquisition held.
type cohort struct {
	mu    sync.Mutex
	heirs map[string][]*heir
	holds map[string]*Hold
}

// plain: l is a plain Mutex on one key; passable: also passes are on;
// heirOf: to may receive l's acquisitions (same key, TTL and fencing).
func (l *Contender) plain() bool {
	return l.kind == MutexKind && len(l.keys) == 1 && l.spec.Record == ""
}
func (l *Contender) passable() bool { return l.set.Handoff && l.plain() }

func (l *Contender) heirOf(to *Contender) bool {
	return to != l && to.passable() && to.key == l.key && to.spec.TTL == l.spec.TTL && to.spec.Fencing == l.spec.Fencing
}

// join registers an Acquire of l as an heir until leave.
func (c *cohort) join(l *Contender, p place, ticket int64, done <-chan struct{}) *heir {
	me := &heir{l: l, id: p.id, ticket: ticket, done: done, got: make(chan *Hold, 1), nudge: make(chan struct{}, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.initLocked()
	c.heirs[l.key] = append(c.heirs[l.key], me)
	return me
}

func (c *cohort) initLocked() {
	if c.heirs == nil {
		c.heirs, c.holds = map[string][]*heir{}, map[string]*Hold{}
	}
}

// leave takes me out of the heirs and returns what was passed to it unreceived.
func (c *cohort) leave(me *heir) *Hold {
	c.mu.Lock()
	c.removeLocked(me)
	c.mu.Unlock()
	select {
	case h := <-me.got:
		return h
	default:
		return nil
	}
}

func (c *cohort) removeLocked(me *heir) {
	if c.heirs[me.l.key] = slices.DeleteFunc(c.heirs[me.l.key], func(o *heir) bool { return o == me }); len(c.heirs[me.l.key]) == 0 {
		delete(c.heirs, me.l.key)
	}
}

// oldestLocked returns the oldest heir on l's key that want accepts, or nil.
func (c *cohort) oldestLocked(l *Contender, want func(*heir) bool) *heir {
	var best *heir
	for _, o := range c.heirs[l.key] {
		if want(o) && (best == nil || o.ticket < best.ticket) {
			best = o
		}
	}
	return best
}

// ahead returns the oldest heir older than me with a place in the queues, or nil.
func (c *cohort) ahead(me *heir) *heir {
	if me == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oldestLocked(me.l, func(o *heir) bool { return o.ticket < me.ticket && o.id != "" && !o.local.Load() })
}

// held reports whether an acquisition that may pass to l is held in this process.
func (c *cohort) held(l *Contender) bool {
	c.mu.Lock()
	h := c.holds[l.key]
	c.mu.Unlock()
	return h != nil && h.lock.heirOf(l) && h.lock.Current() == h
}

// holding records h, just adopted, as its key's acquisition in this process.
func (c *cohort) holding(h *Hold) {
	if h.lock.passable() {
		c.mu.Lock()
		c.initLocked()
		c.holds[h.lock.key] = h
		c.mu.Unlock()
	}
}

// released forgets h and nudges the oldest heir waiting without a place in the queues.
func (c *cohort) released(h *Hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[h.lock.key] == h {
		delete(c.holds, h.lock.key)
	}
	if o := c.oldestLocked(h.lock, func(o *heir) bool { return o.local.Load() }); o != nil {
		select {
		case o.nudge <- struct{}{}:
		default:
		}
	}
}

// pass hands h, within the bounds, to the oldest live heir, sending nothing:
// h ends, and the heir gets its token, validity and holders with the next
// fencing number of h's block. False, h unchanged: nobody may receive it.
func (l *Contender) pass(h *Hold) bool {
	s := l.set
	if !l.passable() || h.LostCause() != nil {
		return false
	}
	now := s.Clock.Now()
	l.mu.Lock()
	ok := h.held && h.releaseVotes == nil && h.passes < maxPasses && now.Sub(h.granted) < passWindow &&
		h.until.Sub(now) >= l.spec.TTL/2
	l.mu.Unlock()
	if !ok {
		return false
	}
	s.cohort.mu.Lock()
	defer s.cohort.mu.Unlock()
	to := s.cohort.oldestLocked(l, func(o *heir) bool {
		select {
		case <-o.done:
			return false
		default:
			return l.heirOf(o.l)
		}
	})
	if to == nil {
		return false
	}
	renewing := s.renewals().end(h) // h's state is final from here, but for a renewal in flight
	l.mu.Lock()
	until, renewedAt, lag, holders, suspect, absent := h.until, h.renewedAt, h.lag, h.holders, h.suspect, h.absent
	l.mu.Unlock()
	fence := h.fence + min(h.fence, 1) // the next of h's block; 0 without fencing
	n := newHold(to.l, h.token, strings.TrimSpace(h.id+" "+to.id), now, lag, until, holders, fence)
	n.granted, n.passes, n.renewedAt, n.absent, n.suspect = h.granted, h.passes+1, renewedAt, absent, suspect
	if renewing { // it may put the key back on the nodes that are not holders: see design.md, "What the receiver gets"
		n.suspect |= ^holders & (1<<len(s.Nodes) - 1)
	}
	if !s.track(n, nil) {
		return false // closed: Close releases h (its renewals ended)
	}
	l.retire(h)
	s.cohort.removeLocked(to)
	s.cohort.holds[l.key] = n
	to.got <- n
	return true
}

// receive makes n, tracked, l's acquisition; received, unless Close came first.
func (l *Contender) receive(n *Hold) {
	l.mu.Lock()
	l.hold = n
	l.mu.Unlock()
	if l.spec.AutoExtend {
		l.set.renewals().watch(n, true)
	}
}

func (l *Contender) received(n *Hold) error {
	if err := l.set.ErrIfClosed("mutex: lock %q not obtained: the node set was closed", l.spec.Name, l.set.Errors.NotObtained); err != nil {
		return err
	}
	l.receive(n)
	return nil
}

// abandon passes on n, passed to l but not received, or else releases it unwaited.
func (l *Contender) abandon(n *Hold) {
	if l.pass(n) {
		return
	}
	l.set.renewals().end(n)
	if l.retire(n) { // else Close released it
		l.releaseAndForget(l.releaseArgs(n.token, modeRelease, place{id: n.id}, l.tombstoneBoxed))
	}
	l.set.cohort.released(n)
}

// retire ends h (Done closes; Close skips it) and reports whether it was held.
func (l *Contender) retire(h *Hold) bool {
	l.mu.Lock()
	held := h.held
	h.held, h.until = false, time.Time{}
	l.mu.Unlock()
	h.finish()
	l.set.untrack(h)
	return held
}

// Shared records that h was given out as a handle: it is never passed, and
// its release's tombstones are its own (tombstone).
func (h *Hold) Shared() {
	h.lock.mu.Lock()
	h.passes = maxPasses
	if h.mark == "" {
		h.mark = node.NewToken()
	}
	h.lock.mu.Unlock()
}

// tombstone is the release script's ARGV[7] for h: the tombstones' life,
// and their mark when h shares its token with another Mutex, whose release
// its tombstones must not confirm (release.lua). The caller holds l.mu.
func (l *Contender) tombstone(h *Hold) any {
	if h.mark == "" {
		return l.tombstoneBoxed
	}
	return fmt.Sprintf("%d:%s", l.tombstoneBoxed, h.mark)
}
