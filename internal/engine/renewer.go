package engine

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// renewer keeps the leases of one node set (docs/design.md, "Leases"): one
// goroutine, while any lease is scheduled, renews those due (together if at
// about the same time) and declares lost those about to end unrenewed.
type renewer struct {
	set       *Set
	mu        sync.Mutex // also orders a lease's last renewal before its release
	due       dueHeap
	runs      bool
	wake      chan struct{} // the goroutine should wake early
	parked    bool          // the goroutine sleeps until parkedFor, when due[0] is due
	parkedFor time.Time
	batches   int        // in flight, for tests (Set.SettleRenewals)
	changed   *sync.Cond // broadcast when batches or parked change, for tests
}

func newRenewer(s *Set) *renewer {
	r := &renewer{set: s, wake: make(chan struct{}, 1)}
	r.changed = sync.NewCond(&r.mu)
	return r
}

// watch schedules h, held and not lost: renewed automatically if renew,
// else only watched, unless it is already.
func (r *renewer) watch(h *Hold, renew bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.lock.mu.Lock()
	held := h.held
	h.lock.mu.Unlock()
	if h.ended || !held || r.lapsedLocked(h, renew) {
		return
	}
	if h.index >= 0 && (h.renew || !renew) {
		return
	}
	h.renew = h.renew || renew
	r.scheduleLocked(h)
}

// lapsed reports whether h is lost, declaring it lost first if its validity
// has ended, or its loss deadline passed and nothing renews it: a process
// paused or starved sees it at its next look, not when the goroutine gets to
// it. renew: h is about to be renewed automatically. r.mu held.
func (r *renewer) lapsedLocked(h *Hold, renew bool) bool {
	now, until := r.set.Clock.Now(), h.Until()
	if h.LostCause() != nil || h.ended || now.Before(until) && (h.renew || renew || now.Before(until.Add(-h.lock.lossMargin()))) {
		return h.LostCause() != nil
	}
	r.removeLocked(h)
	if r.expired(h, now); h.batch == nil {
		r.afterLossLocked(h)
	}
	return true
}

// lapsed is lapsedLocked for a hold not about to be renewed.
func (r *renewer) lapsed(h *Hold) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lapsedLocked(h, false)
}

// watchAfterRelease watches again, without renewing, h whose release was
// not confirmed: Lost still closes before its validity ends.
func (r *renewer) watchAfterRelease(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.LostCause() == nil {
		h.ended, h.renew = false, false
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

// removeLocked takes h out of the heap, if it is there. r.mu held.
func (r *renewer) removeLocked(h *Hold) {
	if h.index >= 0 {
		heap.Remove(&r.due, h.index)
		r.wakeLocked()
	}
}

// wakeLocked wakes the goroutine if it sleeps for other than due[0]. r.mu held.
func (r *renewer) wakeLocked() {
	if r.parked && (len(r.due) == 0 || !r.parkedFor.Equal(r.due[0].due)) {
		r.parked = false
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
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

// scheduleLocked (re)places h in the heap at nextDue, and starts the goroutine. r.mu held.
func (r *renewer) scheduleLocked(h *Hold) {
	h.due, h.slack = r.nextDue(h)
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

// nextDue is when the renewer acts on h next: its next renewal (every
// interval, at the latest half an interval before the loss deadline; or a
// retry), which may go an eighth of an interval early (slack) unless a
// retry; else its loss deadline; lost, the end of the validity it had.
func (r *renewer) nextDue(h *Hold) (due time.Time, slack time.Duration) {
	l := h.lock
	l.mu.Lock()
	until, renewedAt := h.until, h.renewedAt
	l.mu.Unlock()
	if h.sweep {
		return until, 0 // zero (found lost): at once
	}
	deadline := until.Add(-l.lossMargin())
	if r.renews(h) && h.batch == nil {
		interval := l.extendInterval()
		at := renewedAt.Add(interval)
		if soonest := deadline.Add(-interval / 2); soonest.Before(at) {
			at = soonest
		}
		slack = interval / 8
		if !h.retryAt.IsZero() {
			at, slack = h.retryAt, 0
		}
		if at.Before(deadline) {
			return at, slack
		}
	}
	return deadline, 0
}

// renews reports whether h still gets automatic renewals.
func (r *renewer) renews(h *Hold) bool {
	max := h.lock.spec.MaxExtends
	return h.renew && (max == 0 || h.renewed < max)
}

// run is the renewer's goroutine; it returns when nothing is scheduled.
func (r *renewer) run() {
	clk := r.set.Clock
	for {
		r.mu.Lock()
		r.parked = false
		if len(r.due) == 0 {
			r.runs = false
			r.changed.Broadcast()
			r.mu.Unlock()
			return
		}
		now := clk.Now()
		if wait := r.due[0].due.Sub(now); wait > 0 {
			t := clk.NewTimer(wait)
			r.parked, r.parkedFor = true, r.due[0].due
			r.changed.Broadcast()
			r.mu.Unlock()
			select {
			case <-t.C():
			case <-r.wake:
				t.Stop()
			}
			continue
		}
		var renew []*Hold
		for len(r.due) > 0 && !r.due[0].due.Add(-r.due[0].slack).After(now) {
			h := heap.Pop(&r.due).(*Hold)
			switch l := h.lock; {
			case h.sweep:
				// Behind any renewal of h still in flight, without a tombstone
				// (docs/design.md, "No key outlives a declared loss").
				l.releaseAndForget(l.releaseArgs(h.token, modeRelease, place{id: h.id}, 0))
			case r.expired(h, now):
				if h.batch == nil { // else its renewal in flight decides now
					r.afterLossLocked(h)
				}
			default:
				renew = append(renew, h)
			}
		}
		if len(renew) > 0 {
			// Grouped by kind: a script call renews leases of one kind.
			if slices.ContainsFunc(renew, func(h *Hold) bool { return h.lock.kind != renew[0].lock.kind }) {
				slices.SortStableFunc(renew, func(a, b *Hold) int { return strings.Compare(a.lock.kind.Name, b.lock.kind.Name) })
			}
			// Under r.mu: a release waits for these to be queued first.
			b := sendBatch(r.set, r, renew, now)
			r.batches++
			for _, h := range renew {
				h.batch = b
				r.scheduleLocked(h) // at its loss deadline, should the renewal not come back
			}
			go func() {
				_ = b.collect(context.Background(), nil)
				r.mu.Lock()
				r.batches--
				r.changed.Broadcast()
				r.mu.Unlock()
			}()
		}
		r.mu.Unlock()
	}
}

// expired declares h lost if its loss deadline has come, or if nothing
// renews it; it reports whether h left the schedule. A renewal of h still
// in flight is told to decide with the answers it has: a majority's extends
// h, else h is declared lost when it comes back.
func (r *renewer) expired(h *Hold, now time.Time) bool {
	l := h.lock
	until := h.Until() // zero: already lost
	if now.Before(until.Add(-l.lossMargin())) && r.renews(h) && h.batch == nil {
		return false
	}
	end := until.Format(time.RFC3339Nano)
	switch max := l.spec.MaxExtends; {
	case h.batch != nil && now.Before(until):
		h.overdue = true
		h.batch.round.Poke() // the batch decides h now
	case !h.renew:
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and nothing extended it"))
	case max > 0 && h.renewed >= max:
		h.markLost(l.lostErr(nil, fmt.Sprintf("its validity ends at %s after the %d automatic extensions WithMaxExtends allows", end, h.renewed)))
	case h.batch != nil || !h.retryAt.IsZero():
		h.markLost(l.lostErr(l.set.Errors.NodesUnavailable, "no renewal was answered by a majority before the validity's end at "+end))
	default:
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and no renewal ran in time: the process was paused or starved of CPU"))
	}
	return true
}

// finished takes back h after its renewal: renewed, or to retry at retryAt.
func (r *renewer) finished(h *Hold, renewed bool, retryAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.batch, h.retryAt, h.overdue = nil, retryAt, false
	if renewed {
		h.renewed++
	}
	switch {
	case h.LostCause() != nil:
		r.afterLossLocked(h)
	case h.ended:
		r.removeLocked(h)
	default:
		r.scheduleLocked(h)
	}
}

// afterLossLocked keeps a lost lease that was renewed automatically on the
// schedule, to sweep when the validity it had ends, unless released; it
// takes any other off it. r.mu held.
func (r *renewer) afterLossLocked(h *Hold) {
	if h.ended || !h.renew {
		r.removeLocked(h)
		return
	}
	h.sweep = true
	r.scheduleLocked(h)
}

// settle blocks until no renewal is in flight and the goroutine sleeps (or ended).
func (r *renewer) settle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.batches > 0 || r.runs && !(r.parked && r.parkedFor.After(r.set.Clock.Now())) {
		r.changed.Wait()
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
