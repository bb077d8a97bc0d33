package engine

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Observer is told what a set's locks and nodes do (redlock adapts the
// user's); nil skips every report. Methods run on the working goroutines,
// some under the engine's locks: quick, never calling back into the set.
type Observer interface {
	Start(ctx context.Context, c Call) context.Context // a call begins; its Done gets the ctx returned
	Done(ctx context.Context, c Call, r Result)
	Released(ctx context.Context, c Call, held, left time.Duration)
	Lost(primitive, name string, err error) // a Lost channel closed; err is its LostCause
	NodeFailed(addr string, err error)      // a failed answer, or a late one (Errors.NodeTimeout)
	node.QuarantineObserver
	WaitStart(primitive, name string) // an acquisition found the lock taken, and waits
	WaitStop(primitive, name string)
}

// Call names a reported call: Op (an Op... value), primitive, name.
type Call struct{ Op, Primitive, Name string }

// Result is what a reported call did: see redlock.Result.
type Result struct {
	Err         error
	Attempts    int
	Duration    time.Duration
	FailedNodes []string
}

// What a call was, as reported.
const (
	OpLock    = "lock"
	OpTryLock = "trylock"
	OpExtend  = "extend"
	OpUnlock  = "unlock"
)

// Attempts returns the latest Acquire's attempts; the caller holds the op slot.
func (l *Contender) Attempts() int { return l.attempts }

// Start returns when the attempt that won the acquisition started.
func (h *Hold) Start() time.Time { return h.start }

// Believed returns Until, or what it was before the acquisition was found lost.
func (h *Hold) Believed() time.Time {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	return cmp.Or(h.until, h.lostUntil)
}

// ReportedAs returns the primitive and name observers are told of.
func (l *Contender) ReportedAs() (primitive, name string) {
	return cmp.Or(l.spec.Primitive, l.kind.Name), cmp.Or(l.spec.Observed, l.spec.Name)
}

// observeLost tells the observer that h was lost with cause, unless its
// holder had sent its release (unconfirmed): it was not working under it.
func (h *Hold) observeLost(cause error) {
	o := h.lock.set.Observer
	if o == nil {
		return
	}
	h.lock.mu.Lock()
	released := h.releaseVotes != nil
	h.lock.mu.Unlock()
	if !released {
		primitive, name := h.lock.ReportedAs()
		o.Lost(primitive, name, cause)
	}
}

// answered tells the observer of node i's failed or late answer (a
// quarantined node's refusals are no failure).
func (s *Set) answered(i int, err error, sent time.Time, timeout time.Duration) {
	o := s.Observer
	switch {
	case o == nil:
	case err != nil && !errors.Is(err, s.Errors.Quarantined):
		o.NodeFailed(s.Nodes[i].Addr(), err)
	case err == nil && !sent.IsZero() && timeout > 0 && s.Clock.Since(sent) > timeout:
		o.NodeFailed(s.Nodes[i].Addr(), s.Errors.NodeTimeout)
	}
}
