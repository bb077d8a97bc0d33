package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/timing"
)

// closer is a set's closed state and the acquisitions Close must release.
type closer struct {
	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close; made on first use
	holds   map[*Hold]struct{}
}

// Closing returns a channel closed when Close is called.
func (s *Set) Closing() <-chan struct{} {
	c := &s.close
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing == nil {
		c.closing = make(chan struct{})
	}
	return c.closing
}

// ErrIfClosed returns, once Close was called, an error matching Errors.Closed
// and is, with message format of name (a lock's, or an operator's call); nil
// before. The message is built only then: this runs on every call.
func (s *Set) ErrIfClosed(format, name string, is ...error) error {
	s.close.mu.Lock()
	closed := s.close.closed
	s.close.mu.Unlock()
	if !closed {
		return nil
	}
	return NewError(fmt.Sprintf(format, name), append([]error{s.Errors.Closed}, is...)...)
}

// track records h as held, for Close to release; it reports false, and
// records nothing, once the set is closed.
func (s *Set) track(h *Hold) bool {
	c := &s.close
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		if c.holds == nil {
			c.holds = map[*Hold]struct{}{}
		}
		c.holds[h] = struct{}{}
	}
	return !c.closed
}

// untrack forgets h, released.
func (s *Set) untrack(h *Hold) {
	s.close.mu.Lock()
	defer s.close.mu.Unlock()
	delete(s.close.holds, h)
}

// Close refuses every later operation and wakes the calls waiting between
// attempts; then, in parallel, it stops the renewals of every acquisition
// still held, releases it on every node, and closes its Lost with a cause
// matching Lost and Closed; then it waits for the commands still on their
// way. All of it within the per-node timeout of the default TTL
// (docs/design.md, "Close"). A second call returns at once.
func (s *Set) Close() {
	s.Closing() // made, to be closed
	s.close.mu.Lock()
	if s.close.closed {
		s.close.mu.Unlock()
		return
	}
	s.close.closed = true
	close(s.close.closing)
	holds := s.close.holds
	s.close.holds = nil
	s.close.mu.Unlock()
	deadline, stop := armed(s, s.Timeout(timing.DefaultTTL))
	defer stop()
	var wg sync.WaitGroup
	for h := range holds {
		wg.Go(func() {
			l := h.lock
			s.renewals().end(h) // no renewal is sent after this point
			l.mu.Lock()
			held := h.held
			l.mu.Unlock()
			if held {
				l.releaseAll(context.Background(), nil, l.releaseArgs(h.token, modeRelease, place{id: h.id}, l.tombstoneBoxed))
				l.mu.Lock()
				h.held, h.until = false, time.Time{}
				l.mu.Unlock()
			}
			h.markLost(l.lostErr(NewError("the node set was closed (redlock.(*Redlock).Close), which released it", s.Errors.Closed), ""))
		})
	}
	wg.Wait()
	// The tail of a confirmed release, a rollback: the clients are closed
	// next, which would leave their keys on the slower nodes until the TTL.
	drained := make([]<-chan struct{}, len(s.Nodes))
	for i, n := range s.Nodes {
		drained[i] = n.Drained()
	}
drain:
	for _, done := range drained {
		select {
		case <-done:
		case <-deadline:
			break drain
		}
	}
	s.Hub().CloseIdle() // no pub/sub connection lingers after Close
	if s.Observer != nil {
		s.closeQuarantines()
	}
}
