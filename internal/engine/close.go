package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/timing"
)

// closer is a set's closed state and the acquisitions Close must release.
type closer struct {
	closed  atomic.Bool // set under mu
	mu      sync.Mutex
	once    sync.Once
	closing chan struct{} // closed by Close; made on first use
	holds   map[*Hold]struct{}
	calls   sync.WaitGroup // Acquire calls in progress: Close waits for their rollbacks to leave
	longest time.Duration  // the largest per-node timeout of those calls, ever
}

// Closing returns a channel closed when Close is called.
func (s *Set) Closing() <-chan struct{} {
	s.close.once.Do(func() { s.close.closing = make(chan struct{}) })
	return s.close.closing
}

// ErrIfClosed returns nil before Close, then an error matching Closed and is.
func (s *Set) ErrIfClosed(format, name string, is ...error) error {
	if !s.close.closed.Load() {
		return nil
	}
	return NewError(fmt.Sprintf(format, name), append([]error{s.Errors.Closed}, is...)...)
}

// track records h as held for Close to release (nil: an Acquire call of l
// for it to wait for, until calls.Done); false once closed. untrack forgets h.
func (s *Set) track(h *Hold, l *Contender) bool {
	c := &s.close
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed.Load():
		return false
	case h == nil:
		c.calls.Add(1)
		c.longest = max(c.longest, l.timeout())
	case c.holds == nil:
		c.holds = map[*Hold]struct{}{h: {}}
	default:
		c.holds[h] = struct{}{}
	}
	return true
}

func (s *Set) untrack(h *Hold) {
	s.close.mu.Lock()
	defer s.close.mu.Unlock()
	delete(s.close.holds, h)
}

// Close refuses later operations, releases every acquisition held (its
// Lost closes, matching Lost and Closed), then waits for the calls under way
// and the commands on their way, within one per-node timeout, the largest
// of the held locks', the lock calls' made and the default TTL's
// (docs/design.md, "Close"). A second call returns at once.
func (s *Set) Close() {
	s.Closing() // made before the set is closed
	s.close.mu.Lock()
	if s.close.closed.Swap(true) {
		s.close.mu.Unlock()
		return
	}
	close(s.close.closing)
	holds, wait := s.close.holds, max(s.Timeout(timing.DefaultTTL), s.close.longest)
	s.close.holds = nil
	s.close.mu.Unlock()
	for h := range holds {
		wait = max(wait, h.lock.timeout())
	}
	deadline, stop := timing.Timer(s.Clock, wait)
	defer stop()
	var wg sync.WaitGroup
	for h := range holds {
		wg.Go(func() {
			l := h.lock
			s.renewals().end(h) // no renewal is sent after this point
			l.mu.Lock()
			held, tomb := h.held, l.tombstone(h)
			l.mu.Unlock()
			if held {
				l.releaseAll(context.Background(), nil, l.releaseArgs(h.token, modeRelease, place{id: h.id}, tomb))
				l.mu.Lock()
				h.held, h.until = false, time.Time{}
				l.mu.Unlock()
			}
			h.markLost(l.lostErr(NewError("the node set was closed (redlock.(*Redlock).Close), which released it", s.Errors.Closed), ""))
		})
	}
	wg.Wait()
	calls := make(chan struct{}) // their rollbacks and departures from the queues sent
	go func() { s.close.calls.Wait(); close(calls) }()
	if closedBefore(calls, deadline) {
		drained := make([]<-chan struct{}, len(s.Nodes))
		for i, n := range s.Nodes {
			drained[i] = n.Drained()
		}
		for _, done := range drained {
			if !closedBefore(done, deadline) {
				break
			}
		}
	}
	s.Hub().CloseIdle() // no pub/sub connection lingers after Close
	for _, n := range s.Nodes {
		n.Close(s.Observer) // quarantines end, as far as the set is concerned; a release waiting for a hung node is dropped
	}
}

// closedBefore reports whether done is closed before deadline fires (a closed done wins).
func closedBefore(done <-chan struct{}, deadline <-chan time.Time) bool {
	select {
	case <-done:
		return true
	default:
	}
	select {
	case <-done:
		return true
	case <-deadline:
		return false
	}
}
