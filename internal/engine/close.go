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

// closingLocked returns the channel Close closes. c.mu held.
func (c *closer) closingLocked() chan struct{} {
	if c.closing == nil {
		c.closing = make(chan struct{})
	}
	return c.closing
}

// Closing returns a channel closed when Close is called.
func (s *Set) Closing() <-chan struct{} {
	s.close.mu.Lock()
	defer s.close.mu.Unlock()
	return s.close.closingLocked()
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
	s.close.mu.Lock()
	defer s.close.mu.Unlock()
	if s.close.closed {
		return false
	}
	if s.close.holds == nil {
		s.close.holds = map[*Hold]struct{}{}
	}
	s.close.holds[h] = struct{}{}
	return true
}

// untrack forgets h, released.
func (s *Set) untrack(h *Hold) {
	s.close.mu.Lock()
	defer s.close.mu.Unlock()
	delete(s.close.holds, h)
}

// Close refuses every later operation (and wakes the acquisitions waiting
// between attempts, which then return), then releases every acquisition
// still held, in parallel, waiting for every node's answer at most the
// per-node timeout of its lock: stops its renewals, sends the token-checked
// release to every node, and closes its Lost channel with a cause matching
// Lost and Closed. Then it waits for the commands still on their way
// (drain), until the per-node timeout of a lock of the default TTL has
// passed since Close began: the whole takes at most the largest of these
// timeouts. It returns once that is done; a second call returns at once.
func (s *Set) Close() {
	s.close.mu.Lock()
	if s.close.closed {
		s.close.mu.Unlock()
		return
	}
	s.close.closed = true
	close(s.close.closingLocked())
	holds := s.close.holds
	s.close.holds = nil
	s.close.mu.Unlock()
	deadline, stop := armed(s, s.Timeout(timing.DefaultTTL))
	defer stop()
	var wg sync.WaitGroup
	for h := range holds {
		wg.Go(func() { h.lock.closeHold(h) })
	}
	wg.Wait()
	s.drain(deadline)
	s.Hub().CloseIdle() // no pub/sub connection lingers after Close
	if s.Observer != nil {
		s.closeQuarantines()
	}
}

// drain waits, until deadline fires, for the commands already sent to the
// nodes to complete: the tail of a release that a majority confirmed, a failed
// attempt's rollback. The caller closes the clients next, which would cut
// them off and leave their keys on the slower nodes until the TTL.
func (s *Set) drain(deadline <-chan time.Time) {
	drained := make([]<-chan struct{}, len(s.Nodes))
	for i, n := range s.Nodes {
		drained[i] = n.Drained()
	}
	for _, done := range drained {
		select {
		case <-done:
		case <-deadline:
			return
		}
	}
}

// closeHold releases h for Close.
func (l *Contender) closeHold(h *Hold) {
	s := l.set
	s.renewals().end(h) // no renewal is sent after this point
	l.mu.Lock()
	held := h.held
	l.mu.Unlock()
	if held {
		l.releaseAll(context.Background(), nil, l.releaseArgs(h.token, "release", place{id: h.id}, l.tombstoneBoxed))
		l.mu.Lock()
		h.held, h.until = false, time.Time{}
		l.mu.Unlock()
	}
	h.markLost(l.lostErr(NewError("the node set was closed (redlock.(*Redlock).Close), which released it", s.Errors.Closed), ""))
}

// releaseAll sends the release script with args to the nodes want selects
// (nil: all) and waits for every answer, each at most the per-node timeout,
// never past ctx: for a rollback and for Close.
func (l *Contender) releaseAll(ctx context.Context, want func(i int) bool, args []any) {
	rel := send(l.set, l.timeout(), queueBehindStalled, want, l.kind.Release, l.releaseKeys, args, parseRelease)
	deadline, stop := armed(l.set, l.timeout())
	defer stop()
	_ = rel.round.Collect(ctx, deadline)
}
