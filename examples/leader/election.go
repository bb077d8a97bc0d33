package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// candidate is one process taking part in the election. It has its own
// connections to the lock nodes and shares nothing with the other candidates
// but the nodes.
type candidate struct {
	id    int
	rs    *redlock.Redlock
	crash chan struct{} // closed to make the candidate crash if it leads
	// die closes the candidate's connections without releasing anything;
	// closeAll closes its set and connections at the end of the program.
	die, closeAll func()
}

// campaign runs the candidate until ctx ends or it crashes: it waits for the
// leader lock (LockContext, retrying until it gets it), leads while it holds
// it, and campaigns again if it loses it.
//
// WithAutoExtend renews the lock in the background every TTL/3 while the
// candidate leads, so leadership lasts as long as the process is alive and
// reaches the nodes. If it cannot renew (the process is cut off from the
// nodes, or was paused too long), Lost is closed before the lock's validity
// ends, so it stops leading before another candidate can be elected. If the
// process dies, the renewals stop with it, and its lock expires within one TTL
// of the last renewal: the others take over then.
func (c *candidate) campaign(ctx context.Context, rec *record) {
	for {
		m := c.rs.NewMutex(leaderLock,
			mutex.WithTTL(ttl),
			mutex.WithAutoExtend(),
			// Waiting candidates try at least every 50ms, so a dead leader's
			// lock is taken over soon after it expires.
			mutex.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond))
		if err := m.LockContext(ctx); err != nil {
			return // ctx ended: LockContext retries until then
		}
		i := rec.begin(c.id)
		select {
		case <-m.Lost():
			// Stop acting as leader at once, then clean up.
			end := time.Now()
			if u := m.Until(); !u.IsZero() && u.Before(end) {
				end = u
			}
			rec.end(i, end, m.Until(), "lost the lock: "+m.LostCause().Error())
			_ = m.UnlockContext(context.WithoutCancel(ctx))
		case <-c.crash:
			rec.end(i, time.Now(), m.Until(), "crashed")
			// The crash: the process dies with its connections. It neither
			// renews nor unlocks; its lock stays on the nodes until the TTL
			// runs out.
			c.die()
			// Bookkeeping, not part of the crash: the Mutex's renewal
			// goroutine finds the connections closed and gives up, closing
			// Lost; waiting for it leaves nothing running behind.
			<-m.Lost()
			return
		case <-ctx.Done():
			rec.end(i, time.Now(), m.Until(), "stepped down")
			_ = m.UnlockContext(context.WithoutCancel(ctx))
			return
		}
	}
}

// term is one candidate's time as leader.
type term struct {
	Candidate int
	Start     time.Time // when it became leader (its LockContext returned)
	End       time.Time // when it stopped acting as leader; zero while it leads
	// ValidUntil is the end of its lock's validity when the term ended: no
	// other candidate can be elected before it.
	ValidUntil time.Time
	How        string // how the term ended
}

// record is the election's log, kept by an observer outside the candidates
// (they share nothing but the nodes; the log is the demo's, not part of the
// election). It is safe for concurrent use.
type record struct {
	mu      sync.Mutex
	terms   []term
	leading atomic.Int32 // candidates that currently act as leader
	most    atomic.Int32 // the largest value leading has had
	elected chan term    // each term as it starts
}

func newRecord() *record { return &record{elected: make(chan term, 64)} }

// begin records that candidate id is the leader from now and returns the
// term's index.
func (r *record) begin(id int) int {
	n := r.leading.Add(1)
	for {
		most := r.most.Load()
		if n <= most || r.most.CompareAndSwap(most, n) {
			break
		}
	}
	t := term{Candidate: id, Start: time.Now()}
	r.mu.Lock()
	r.terms = append(r.terms, t)
	i := len(r.terms) - 1
	r.mu.Unlock()
	select {
	case r.elected <- t:
	default: // nobody is listening that closely
	}
	return i
}

// end records that term i ended at end.
func (r *record) end(i int, end, validUntil time.Time, how string) {
	r.mu.Lock()
	r.terms[i].End, r.terms[i].ValidUntil, r.terms[i].How = end, validUntil, how
	r.mu.Unlock()
	r.leading.Add(-1)
}

// snapshot returns the terms so far, in the order they started.
func (r *record) snapshot() []term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]term(nil), r.terms...)
}
