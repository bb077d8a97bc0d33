package engine

import (
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// renewer keeps the leases of one node set: one goroutine, running while any
// lease is scheduled, that renews the leases with automatic renewal when
// they are due and declares lost those whose validity is about to end
// unrenewed. Renewals due at about the same time go out together, as one
// script call per node for many keys (see batch), so the work per round trip
// grows with the number of leases, not the goroutines.
type renewer struct {
	set  *Set
	mu   sync.Mutex // also orders a lease's last renewal before its release
	due  dueHeap
	runs bool
	wake chan struct{} // closed when the goroutine should wake early; then replaced

	// For tests (Set.SettleRenewals): batches in flight, whether the
	// goroutine sleeps on a timer for parkedFor, and a channel closed and
	// replaced on every change of these.
	batches   int
	parked    bool
	parkedFor time.Time
	changed   chan struct{}
}

func newRenewer(s *Set) *renewer {
	return &renewer{set: s, wake: make(chan struct{}), changed: make(chan struct{})}
}

// notifyLocked wakes settle. r.mu held.
func (r *renewer) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// batchDone counts a batch that has finished.
func (r *renewer) batchDone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches--
	r.notifyLocked()
}

// autoRenew schedules h to be renewed automatically.
func (r *renewer) autoRenew(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.ended {
		return
	}
	h.watched, h.renew = true, true
	r.scheduleLocked(h)
}

// watch starts watching h's validity, unless it is already scheduled or no
// longer held.
func (r *renewer) watch(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.watched || h.ended || h.LostCause() != nil {
		return
	}
	h.lock.mu.Lock()
	held := h.held
	h.lock.mu.Unlock()
	if held {
		h.watched = true
		r.scheduleLocked(h)
	}
}

// end stops renewing and watching h. Once it returns, no renewal of h will
// be sent: a release sent after it reaches every node after the last one.
func (r *renewer) end(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.ended = true
	r.removeLocked(h)
}

// removeLocked takes h out of the heap, if it is there, and wakes the
// goroutine so it sleeps until what is due next (or returns). r.mu held.
func (r *renewer) removeLocked(h *Hold) {
	if h.index < 0 {
		return
	}
	heap.Remove(&r.due, h.index)
	r.wakeLocked()
}

// wakeLocked wakes the goroutine if it sleeps for anything else than what
// is due first now: sooner, to act on it, or later, to notice there is
// nothing left. r.mu held.
func (r *renewer) wakeLocked() {
	if !r.parked || (len(r.due) > 0 && r.parkedFor.Equal(r.due[0].due)) {
		return
	}
	close(r.wake)
	r.wake = make(chan struct{})
	r.parked = false
}

// watchAfterRelease keeps watching, without renewing, an acquisition whose
// release could not be confirmed: Lost still closes before its validity ends.
func (r *renewer) watchAfterRelease(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.LostCause() != nil {
		return
	}
	h.ended, h.renew, h.watched = false, false, true
	r.scheduleLocked(h)
}

// rescheduled tells the renewer that h's validity moved (a manual extension).
func (r *renewer) rescheduled(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.index >= 0 {
		h.retryAt = time.Time{}
		r.scheduleLocked(h)
	}
}

// scheduleLocked (re)places h in the heap at its next due time: while a
// renewal of it is in flight, its loss deadline. r.mu held.
func (r *renewer) scheduleLocked(h *Hold) {
	h.due, h.dueRenewal = r.nextDue(h)
	if h.index >= 0 {
		heap.Fix(&r.due, h.index)
	} else {
		heap.Push(&r.due, h)
	}
	r.wakeLocked()
	if !r.runs {
		r.runs = true
		go r.run()
	}
}

// nextDue is when the renewer acts on h next: its next renewal, or the end of
// its validity minus the loss margin, whichever comes first.
func (r *renewer) nextDue(h *Hold) (due time.Time, renewal bool) {
	l := h.lock
	l.mu.Lock()
	until, renewedAt := h.until, h.renewedAt
	l.mu.Unlock()
	if h.sweep {
		return until, false // zero (found lost): at once
	}
	deadline := until.Add(-l.lossMargin())
	if r.renews(h) && !h.busy {
		// Every interval, and sooner when the validity is short (an
		// acquisition or renewal that took long): half an interval before
		// the loss deadline at the latest.
		interval := l.extendInterval()
		at := renewedAt.Add(interval)
		if soonest := deadline.Add(-interval / 2); soonest.Before(at) {
			at = soonest
		}
		if !h.retryAt.IsZero() {
			at = h.retryAt
		}
		if at.Before(deadline) {
			return at, true
		}
	}
	return deadline, false
}

// renews reports whether h still gets automatic renewals.
func (r *renewer) renews(h *Hold) bool {
	max := h.lock.spec.MaxExtends
	return h.renew && (max == 0 || h.renewed < max)
}

// slack is how early a renewal may go along with one due before it, so that
// renewals due at about the same time go out in one batch: an eighth of the
// interval. A loss deadline and a retry have none.
func slack(h *Hold) time.Duration {
	if !h.dueRenewal || !h.retryAt.IsZero() {
		return 0
	}
	return h.lock.extendInterval() / 8
}

// run is the renewer's goroutine; it returns when nothing is scheduled.
func (r *renewer) run() {
	clk := r.set.Clock
	for {
		r.mu.Lock()
		if len(r.due) == 0 {
			r.runs = false
			r.notifyLocked()
			r.mu.Unlock()
			return
		}
		// Wake when the first is due, and take with it every renewal due
		// within its slack: renewals of leases taken at different times
		// go out together, a little early.
		now := clk.Now()
		at := r.due[0].due
		if wait := at.Sub(now); wait > 0 {
			t := clk.NewTimer(wait)
			r.parked, r.parkedFor = true, at
			wake := r.wake
			r.notifyLocked()
			r.mu.Unlock()
			select {
			case <-t.C():
			case <-wake:
				t.Stop()
			}
			r.mu.Lock()
			r.parked = false
			r.mu.Unlock()
			continue
		}
		var renew []*Hold
		for len(r.due) > 0 {
			h := r.due[0]
			if h.due.Add(-slack(h)).After(now) {
				break
			}
			heap.Pop(&r.due)
			if h.sweep {
				r.sweep(h)
				continue
			}
			if r.expired(h, now) {
				r.afterLossLocked(h)
				continue
			}
			renew = append(renew, h)
		}
		if len(renew) > 0 {
			// Grouped by kind: a script call renews leases of one kind
			// (almost always there is only one: no sort then).
			if slices.ContainsFunc(renew, func(h *Hold) bool { return h.lock.kind != renew[0].lock.kind }) {
				slices.SortStableFunc(renew, func(a, b *Hold) int { return strings.Compare(a.lock.kind.Name, b.lock.kind.Name) })
			}
			// Under r.mu: a release waits for these to be queued first.
			b := newBatch(r, renew, now)
			r.batches++
			for _, h := range renew {
				h.busy, h.batch = true, b
				r.scheduleLocked(h) // at its loss deadline, should the renewal not come back
			}
			b.send()
		}
		r.mu.Unlock()
	}
}

// expired declares h lost if its loss deadline has come, or if nothing
// renews it; it reports whether h left the schedule.
func (r *renewer) expired(h *Hold, now time.Time) bool {
	l := h.lock
	l.mu.Lock()
	until := h.until
	l.mu.Unlock()
	if until.IsZero() {
		h.markLost(l.lostErr(l.set.Errors.NotHeld, "a majority no longer holds its token"))
		return true
	}
	deadline := until.Add(-l.lossMargin())
	if now.Before(deadline) && r.renews(h) && !h.busy {
		return false
	}
	end := until.Format(time.RFC3339Nano)
	switch max := l.spec.MaxExtends; {
	case h.busy:
		h.markLost(l.lostErr(l.set.Errors.NodesUnavailable, "no renewal was answered by a majority before the validity's end at "+end))
		h.batch.round.Poke() // the batch looks again at whether any lease waits for it
	case !h.renew:
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and nothing extended it"))
	case max > 0 && h.renewed >= max:
		h.markLost(l.lostErr(nil, fmt.Sprintf("its validity ends at %s after the %d automatic extensions WithMaxExtends allows", end, h.renewed)))
	case !h.retryAt.IsZero():
		h.markLost(l.lostErr(l.set.Errors.NodesUnavailable, "no extension reached a majority before the validity's end at "+end))
	default:
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and no renewal ran in time: the process was paused or starved of CPU"))
	}
	return true
}

// finished takes back h after its renewal.
func (r *renewer) finished(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.busy, h.batch = false, nil
	if h.LostCause() != nil {
		r.afterLossLocked(h)
		return
	}
	if h.ended {
		r.removeLocked(h)
		return
	}
	r.scheduleLocked(h)
}

// afterLossLocked keeps a lost lease that was renewed automatically on the
// schedule until the validity it had ends, or until it is released, and
// takes any other out of it. r.mu held.
func (r *renewer) afterLossLocked(h *Hold) {
	if h.ended || !h.renew {
		r.removeLocked(h)
		return
	}
	h.sweep = true
	r.scheduleLocked(h)
}

// sweep sends h's token-checked release to every node, once the validity h
// had when it was found lost has ended (at once if it was found lost by a
// majority): a renewal still queued or in flight on a node when the loss was
// declared would otherwise reset or put back the key there after the holder
// was told, keeping the next owner out for a TTL. Per-node order puts the
// release after it. It leaves no tombstone: the holder's own release later
// still learns that the lock was lost. r.mu held.
func (r *renewer) sweep(h *Hold) {
	l := h.lock
	args := l.releaseArgs(h.token, "release", place{id: h.id}, 0)
	for i := range r.set.Nodes {
		sendAndForget(r.set, i, l.kind.Release, l.releaseKeys, args, nil)
	}
}

// settle blocks until no renewal is in flight and the renewer sleeps until
// the next thing due (or has nothing left to do).
func (r *renewer) settle() {
	for {
		r.mu.Lock()
		quiet := r.batches == 0 && (!r.runs ||
			(len(r.due) > 0 && r.parked && r.parkedFor.After(r.set.Clock.Now()) &&
				r.parkedFor.Equal(r.due[0].due)))
		changed := r.changed
		r.mu.Unlock()
		if quiet {
			return
		}
		<-changed
	}
}

// dueHeap orders leases by due time.
type dueHeap []*Hold

func (d dueHeap) Len() int           { return len(d) }
func (d dueHeap) Less(i, j int) bool { return d[i].due.Before(d[j].due) }
func (d dueHeap) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].index, d[j].index = i, j
}
func (d *dueHeap) Push(x any) {
	h := x.(*Hold)
	h.index = len(*d)
	*d = append(*d, h)
}
func (d *dueHeap) Pop() any {
	old := *d
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*d = old[:len(old)-1]
	return h
}
