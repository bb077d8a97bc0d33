package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/round"
)

// Observer is told what a set's locks and nodes do; package redlock adapts
// the user's redlock.Observer to it. A Set without one (nil) skips every
// report before building anything, so that an unobserved lock costs nothing.
// Methods are called from the goroutines doing the work, some under the
// engine's locks: they must return quickly and never call back into the set.
type Observer interface {
	// Start and Done bracket one call of a primitive; Done gets the ctx
	// that Start returned.
	Start(ctx context.Context, c Call) context.Context
	Done(ctx context.Context, c Call, r Result)
	// Released: the call ended an acquisition held for held, with left of
	// its validity (negative: the work overran it).
	Released(ctx context.Context, c Call, held, left time.Duration)
	// Lost: an acquisition's Lost channel closed; err is its LostCause.
	Lost(primitive, name string, err error)
	// NodeFailed: a node's answer failed, or came after the per-node timeout.
	NodeFailed(addr, kind string, err error)
	QuarantineEnter(addr string, until time.Time)
	QuarantineLeave(addr string)
	// WaitStart and WaitStop bracket the wait of an acquisition that found
	// the lock taken.
	WaitStart(primitive, name string)
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
	if h.until.IsZero() {
		return h.lostUntil
	}
	return h.until
}

// ReportedAs returns the primitive and name observers are told of for l's
// waits and losses (Spec.Primitive and Spec.Observed).
func (l *Contender) ReportedAs() (primitive, name string) {
	primitive, name = l.spec.Primitive, l.spec.Observed
	if primitive == "" {
		primitive = l.kind.Name
	}
	if name == "" {
		name = l.spec.Name
	}
	return primitive, name
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
// node's refusals are not failures of the node: the quarantine is told apart.
func (s *Set) answered(i int, err error, sent time.Time, timeout time.Duration) {
	o := s.Observer
	switch {
	case o == nil:
	case err != nil && !errors.Is(err, s.Errors.Quarantined):
		o.NodeFailed(s.Nodes[i].Addr(), errorType(err), err)
	case err == nil && !sent.IsZero() && timeout > 0 && s.Clock.Since(sent) > timeout:
		o.NodeFailed(s.Nodes[i].Addr(), "timeout", s.Errors.NodeTimeout)
	}
}

// errorType classifies a node's failure for observers, with few values:
// "timeout", "connection", the prefix of a Redis error reply ("READONLY",
// "NOAUTH", "WRONGTYPE", "ERR", ...), "reply" for an answer of the wrong
// shape, or "other".
func errorType(err error) string {
	var stalled *stalledError
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, round.ErrDeadline) || errors.As(err, &stalled) ||
		errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case strings.HasPrefix(err.Error(), "NOAUTH"):
		return "NOAUTH" // a refusal the node explained after closing the connection
	case errors.As(err, &re) && !errors.Is(err, redis.ErrClosed):
		if p := replyPrefix(re.Error()); p != "" {
			return p
		}
		return "other"
	case errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET):
		return "connection"
	case strings.HasPrefix(err.Error(), "node: unexpected reply"):
		return "reply"
	}
	return "other"
}

// replyPrefix returns the first word of a Redis error reply if it is an
// error code (capital letters, at most 16), or "".
func replyPrefix(msg string) string {
	word, _, _ := strings.Cut(msg, " ")
	if word == "" || len(word) > 16 {
		return ""
	}
	for _, r := range word {
		if r < 'A' || r > 'Z' {
			return ""
		}
	}
	return word
}

// quarantines is what a set's observer was told of its nodes' quarantines.
type quarantines struct {
	mu     sync.Mutex // held while the observer is told, so enter and leave stay in order
	closed bool
	nodes  []quarantine // per node; made on first use
}

type quarantine struct {
	until time.Time
	timer clock.Timer // fires at until, to tell the node left; nil: not in quarantine
}

// noteQuarantine tells the observer when node i, whose quarantine ends at
// until, enters its quarantine, and arranges to tell when it leaves.
func (s *Set) noteQuarantine(i int, until time.Time) {
	o := s.Observer
	if o == nil {
		return
	}
	q := &s.quarantines
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.nodes == nil {
		q.nodes = make([]quarantine, len(s.Nodes))
	}
	n := &q.nodes[i]
	now := s.Clock.Now()
	switch {
	case until.After(now) && !until.Equal(n.until):
		if n.timer == nil {
			o.QuarantineEnter(s.Nodes[i].Addr(), until)
		} else {
			n.timer.Stop()
		}
		n.until = until
		n.timer = s.Clock.AfterFunc(until.Sub(now), func() { s.leaveQuarantine(i, until) })
	case !until.After(now) && n.timer != nil:
		n.timer.Stop()
		n.timer = nil
		o.QuarantineLeave(s.Nodes[i].Addr())
	}
}

// leaveQuarantine tells the observer that node i left the quarantine that
// ended at until, unless it was extended since.
func (s *Set) leaveQuarantine(i int, until time.Time) {
	q := &s.quarantines
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := &q.nodes[i]; !q.closed && n.timer != nil && n.until.Equal(until) {
		n.timer = nil
		s.Observer.QuarantineLeave(s.Nodes[i].Addr())
	}
}

// closeQuarantines tells the observer that every node this closed set kept
// in quarantine has left it, as far as the set is concerned.
func (s *Set) closeQuarantines() {
	q := &s.quarantines
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for i := range q.nodes {
		if n := &q.nodes[i]; n.timer != nil {
			n.timer.Stop()
			n.timer = nil
			s.Observer.QuarantineLeave(s.Nodes[i].Addr())
		}
	}
}
