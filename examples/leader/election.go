package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// newElection is a candidate's (or an observer's) place in the election on
// leaderName. Waiting candidates try at least every 50ms, so a dead leader's
// lock is taken over soon after it expires.
func newElection(rs *redlock.Redlock) *mutex.Election {
	return rs.NewElection(leaderName, mutex.WithTTL(ttl), mutex.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond))
}

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

// campaign runs the candidate until ctx ends or it crashes: Campaign waits
// until it leads; the Election keeps the leadership alive in the background,
// and Done closes, before anyone else can be elected, if it cannot. Then it
// campaigns again. A dead process's leadership expires within one TTL of
// its last renewal.
func (c *candidate) campaign(ctx context.Context, rec *record) {
	e := newElection(c.rs)
	for {
		if err := e.Campaign(ctx, fmt.Sprintf("candidate %d", c.id)); err != nil {
			return // ctx ended: Campaign waits until then
		}
		i := rec.begin(c.id)
		select {
		case <-e.Done(): // stop acting as leader at once
			rec.end(i, "lost the leadership")
		case <-c.crash:
			// The crash: the process dies with its connections; it neither
			// renews nor resigns, and its lock stays until the TTL runs out.
			rec.end(i, "crashed")
			c.die()
			<-e.Done() // bookkeeping: the renewals give up; nothing runs behind
			return
		case <-ctx.Done():
			rec.end(i, "stepped down")
			_ = e.Resign(context.WithoutCancel(ctx))
			return
		}
	}
}

// term is one candidate's time as leader.
type term struct {
	Candidate  int
	Start, End time.Time // Campaign returned; it stopped acting as leader (zero while it leads)
	How        string    // how the term ended
}

// record is the election's log, kept outside the candidates (the demo's, not
// part of the election). It is safe for concurrent use.
type record struct {
	mu      sync.Mutex
	terms   []term
	leading atomic.Int32 // candidates that currently act as leader
	most    atomic.Int32 // the largest value leading has had
	elected chan term    // each term as it starts
}

func newRecord() *record { return &record{elected: make(chan term, 64)} }

// begin records that candidate id leads from now and returns the term's index.
func (r *record) begin(id int) int {
	n := r.leading.Add(1)
	for most := r.most.Load(); n > most && !r.most.CompareAndSwap(most, n); most = r.most.Load() {
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

// end records that term i ended now.
func (r *record) end(i int, how string) {
	r.leading.Add(-1)
	r.mu.Lock()
	r.terms[i].End, r.terms[i].How = time.Now(), how
	r.mu.Unlock()
}

// snapshot returns the terms so far, in the order they started.
func (r *record) snapshot() []term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]term(nil), r.terms...)
}
