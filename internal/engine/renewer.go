package engine

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// renewer keeps a node set's leases ("Leases"): one goroutine, while any is
// scheduled, renews those due in batches and declares lost those ending unrenewed.
type renewer struct {
	set       *Set
	mu        sync.Mutex // also orders a lease's last renewal before its release
	due       dueHeap
	runs      bool
	wake      chan struct{} // the goroutine should wake early
	parkedFor time.Time     // when due[0] is due, while the goroutine sleeps until then; else zero
	renewing  int           // leases whose renewal is in flight, for tests (Set.SettleRenewals)
	changed   *sync.Cond    // broadcast when renewing or parkedFor change, for tests
	starvedAt time.Time     // the latest loss judged by starved
	wasSlow   bool          // starved's verdict for the wave of losses it is in
}

func newRenewer(s *Set) *renewer {
	r := &renewer{set: s, wake: make(chan struct{}, 1)}
	r.changed = sync.NewCond(&r.mu)
	return r
}

// watch schedules h, held and not lost: renewed if renew, else only watched.
func (r *renewer) watch(h *Hold, renew bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.lock.mu.Lock()
	held := h.held
	h.lock.mu.Unlock()
	if h.ended.Load() || !held || r.lapsedLocked(h, renew) || h.index >= 0 && (h.renew || !renew) {
		return
	}
	h.renew = h.renew || renew
	r.scheduleLocked(h)
}

// lapsedLocked reports whether h is lost, declaring it lost first if its
// validity or (nothing renewing it) its loss deadline passed. r.mu held.
func (r *renewer) lapsedLocked(h *Hold, renew bool) bool {
	now, until := r.set.Clock.Now(), h.Until()
	if h.LostCause() != nil || h.ended.Load() || now.Before(until) && (h.renew || renew || now.Before(until.Add(-h.lock.lossMargin()))) {
		return h.LostCause() != nil
	}
	return r.expired(h, now)
}

// lapsed is lapsedLocked for a hold not about to be renewed.
func (r *renewer) lapsed(h *Hold) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lapsedLocked(h, false)
}

// watchAfterRelease watches again h whose release was not confirmed.
func (r *renewer) watchAfterRelease(h *Hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.lock.mu.Lock()
	held := h.held
	h.lock.mu.Unlock()
	if held && h.LostCause() == nil {
		h.ended.Store(false)
		h.renew = false
		r.scheduleLocked(h)
	}
}

// end stops renewing and watching h: no renewal of h is sent once it
// returns. It reports whether one is still in flight, which may put h's
// keys back on nodes that are not its holders, unknown to h ("Leases").
func (r *renewer) end(h *Hold) (renewing bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.ended.Store(true)
	r.removeLocked(h)
	return h.batch != nil
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
	if !r.parkedFor.IsZero() && (len(r.due) == 0 || !r.parkedFor.Equal(r.due[0].due)) {
		r.parkedFor = time.Time{}
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// rescheduled tells the renewer that h's validity moved.
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

// nextDue is when the renewer acts on h next, and how much earlier it may go.
func (r *renewer) nextDue(h *Hold) (due time.Time, slack time.Duration) {
	l := h.lock
	l.mu.Lock()
	until, renewedAt := h.until, h.renewedAt
	l.mu.Unlock()
	deadline, interval := until.Add(-l.lossMargin()), l.extendInterval()
	switch soonest := deadline.Add(-interval / 2); {
	case h.sweep:
		return until, 0 // zero (found lost): at once
	case !r.renews(h) || h.batch != nil:
		return deadline, 0
	case !h.retryAt.IsZero():
		due = h.retryAt
	case renewedAt.Add(interval).Before(soonest):
		due, slack = renewedAt.Add(interval), interval/8
	default:
		due, slack = soonest, interval/8
	}
	if due.Before(deadline) {
		return due, slack
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
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.due) > 0 {
		now := clk.Now()
		if wait := r.due[0].due.Sub(now); wait > 0 {
			t := clk.NewTimer(wait)
			r.parkedFor = r.due[0].due
			r.changed.Broadcast()
			r.mu.Unlock()
			select {
			case <-t.C():
			case <-r.wake:
				t.Stop()
			}
			r.mu.Lock()
			r.parkedFor = time.Time{}
			continue
		}
		var renew []*Hold
		for len(r.due) > 0 && !r.due[0].due.Add(-r.due[0].slack).After(now) {
			h := heap.Pop(&r.due).(*Hold)
			if l := h.lock; h.sweep {
				// "No key outlives a declared loss".
				l.releaseAndForget(l.releaseArgs(h.token, modeRelease, place{id: h.id}, 0))
			} else if !r.expired(h, now) {
				renew = append(renew, h)
			}
		}
		if len(renew) > 0 {
			if slices.ContainsFunc(renew, func(h *Hold) bool { return h.lock.kind != renew[0].lock.kind }) {
				slices.SortStableFunc(renew, func(a, b *Hold) int { return strings.Compare(a.lock.kind.Name, b.lock.kind.Name) })
			}
			// Under r.mu: a release waits for these to be queued first.
			b := sendBatch(r.set, r, renew, now)
			r.renewing += len(renew)
			for _, h := range renew {
				h.batch = b
				r.scheduleLocked(h) // at its loss deadline, should the renewal not come back
			}
			go b.collect(context.Background(), nil) // without ctx nor deadline: decides every lease
		}
	}
	r.runs = false
	r.changed.Broadcast()
}

// expired declares h lost if its loss deadline came or nothing renews it,
// and reports whether it did; a renewal in flight is told to decide with
// what it has instead. r.mu held.
func (r *renewer) expired(h *Hold, now time.Time) bool {
	l := h.lock
	until := h.Until() // zero: already lost
	if now.Before(until.Add(-l.lossMargin())) && r.renews(h) && h.batch == nil {
		return false
	}
	r.removeLocked(h)
	end := until.Format(time.RFC3339Nano)
	switch max := l.spec.MaxExtends; {
	case h.batch != nil && now.Before(until):
		h.overdue.Store(true)
		h.batch.round.Poke() // the batch decides h now
	case !h.renew:
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and nothing extended it"))
	case max > 0 && h.renewed >= max:
		h.markLost(l.lostErr(nil, fmt.Sprintf("its validity ends at %s after the %d automatic extensions WithMaxExtends allows", end, h.renewed)))
	case (h.batch != nil || !h.retryAt.IsZero()) && r.slowLocked(h, until, now):
		// The answers may have come, unread: no node is blamed for this process's delays.
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and no renewal's answers were read in time: the process was paused or starved of CPU"))
	case h.batch != nil || !h.retryAt.IsZero():
		h.markLost(l.lostErr(l.unanswered(h.failed), "no renewal was answered by a majority before the validity's end at "+end))
	default:
		h.markLost(l.lostErr(nil, "its validity ends at "+end+" and no renewal ran in time: the process was paused or starved of CPU"))
	}
	if h.batch == nil { // else its renewal in flight decides
		r.afterLossLocked(h)
	}
	return true
}

// slowLocked reports whether this process was starved of CPU since the
// validity ending at until began: the cause of a lease's loss then, not the
// nodes. r.mu held.
func (r *renewer) slowLocked(h *Hold, until, now time.Time) bool {
	l := h.lock
	return l.set.Clock == clock.Real() && r.starved(l, until.Add(-l.spec.TTL), now)
}

// unanswered is the cause of a lease lost for want of a majority's answers
// in time, with the nodes' failures.
func (l *Contender) unanswered(failed *multierror.Error) error {
	return &OpError{msg: l.set.Errors.NodesUnavailable.Error(), is: []error{l.set.Errors.NodesUnavailable}, nodes: failed}
}

// starved reports whether this process was starved of CPU since since; a
// wave of losses keeps its first verdict ("Per-node timeout"). r.mu held.
func (r *renewer) starved(l *Contender, since, now time.Time) bool {
	if now.Sub(r.starvedAt) > l.timeout() || now.Before(r.starvedAt) {
		r.wasSlow = timing.WaitedToRunSampled(since, min(l.timeout()/4, l.lossMargin()))
	}
	r.starvedAt = now
	return r.wasSlow
}

// finished takes back h after its renewal: extended (ok), lost (gone), or to
// retry, failed keeping the nodes' failures. A renewal that a majority
// extended too late (late) lost h to whoever was slow, this process or the
// nodes, as judged at a loss deadline; the nodes still hold its token.
func (r *renewer) finished(h *Hold, ok bool, gone string, late bool, failed *multierror.Error) {
	l := h.lock
	if gone != "" && !late {
		h.foundLost(l.lostErr(r.set.Errors.NotHeld, gone))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if gone != "" && late {
		var cause error
		if until := h.Until(); r.slowLocked(h, until, r.set.Clock.Now()) {
			gone += ": the process was paused or starved of CPU"
		} else {
			cause = l.unanswered(failed)
		}
		h.foundLost(l.lostErr(cause, gone))
	}
	h.batch, h.retryAt, h.failed, r.renewing = nil, time.Time{}, failed, r.renewing-1
	h.overdue.Store(false)
	r.changed.Broadcast()
	if h.ended.Load() || h.LostCause() != nil {
		r.afterLossLocked(h)
		return
	}
	if ok {
		h.renewed++
	} else {
		now := r.set.Clock.Now()
		h.retryAt = now.Add(max(h.Until().Add(-l.lossMargin()).Sub(now)/4, l.spec.TTL/100))
	}
	r.scheduleLocked(h)
}

// afterLossLocked keeps a lost auto-renewed lease scheduled, to sweep when
// its validity ends; others leave the schedule. r.mu held.
func (r *renewer) afterLossLocked(h *Hold) {
	if h.ended.Load() || !h.renew {
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
	for r.renewing > 0 || r.runs && !r.parkedFor.After(r.set.Clock.Now()) {
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
