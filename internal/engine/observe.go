package engine

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Observer is told what a set's locks and nodes do; package redlock adapts
// the user's redlock.Observer to it and classifies what it is told. A Set
// without one (nil) skips every report before building anything. Methods run
// on the goroutines doing the work, some under the engine's locks: they must
// return quickly and never call back into the set.
type Observer interface {
	Start(ctx context.Context, c Call) context.Context // a call begins; its Done gets the ctx returned
	Done(ctx context.Context, c Call, r Result)
	// Released: the call ended an acquisition held for held, with left of
	// its validity (negative: the work overran it).
	Released(ctx context.Context, c Call, held, left time.Duration)
	Lost(primitive, name string, err error) // a Lost channel closed; err is its LostCause
	NodeFailed(addr string, err error)      // a failed answer, or a late one (Errors.NodeTimeout)
	node.QuarantineObserver
	WaitStart(primitive, name string) // an acquisition found the lock taken, and waits
	WaitStop(primitive, name string)
}

// Call names a reported call: its Op (one of the Op... values), the
// primitive and the lock's name.
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

// Attempts returns how many attempts the latest Acquire made. The caller
// holds the op slot.
func (l *Contender) Attempts() int { return l.attempts }

// Start returns when the attempt that won the acquisition started.
func (h *Hold) Start() time.Time { return h.start }

// Believed returns the end of the validity as the holder last knew it: Until,
// or what it was before the acquisition was found lost.
func (h *Hold) Believed() time.Time {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	return cmp.Or(h.until, h.lostUntil)
}

// ReportedAs returns the primitive and name observers are told of for l:
// Spec.Primitive and Spec.Observed, or else the kind's name and Spec.Name.
func (l *Contender) ReportedAs() (primitive, name string) {
	return cmp.Or(l.spec.Primitive, l.kind.Name), cmp.Or(l.spec.Observed, l.spec.Name)
}

// observeLost tells the observer that h was lost with cause.
func (h *Hold) observeLost(cause error) {
	if o := h.lock.set.Observer; o != nil {
		primitive, name := h.lock.ReportedAs()
		o.Lost(primitive, name, cause)
	}
}

// answered tells the observer of node i's failed answer (err not nil), or
// of one that came more than timeout after it left at sent. A quarantined
// node's refusals are not failures of the node.
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
