package redlock

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/mutex"
)

// Observer is told what a node set's locks and nodes do, for metrics and
// traces; package otelquorumlock implements it with OpenTelemetry. Every
// field is optional (nil is skipped), and later versions may add fields: set
// them by name. The funcs are called synchronously, from the calls and the
// background work they report, often from many goroutines at once: they must
// be safe for concurrent use, return quickly, and never call the set's locks.
// Lock names are unbounded (one per order, per user): keep them out of metric
// labels. See docs/operations.md, "What to monitor".
type Observer struct {
	// Start is called as a call begins; the ctx it returns (nil: ctx) is
	// given to that call's Released and Done. The call itself keeps ctx.
	Start func(ctx context.Context, c Call) context.Context
	// Done is called once per Start, as the call returns.
	Done func(ctx context.Context, c Call, r Result)
	// Released is called, before Done, by an unlock that ended an
	// acquisition; never for one that Close releases (LeaseLost is, with
	// mutex.ErrClosed).
	Released func(ctx context.Context, c Call, r Release)
	// LeaseLost is called when an acquisition's Lost channel closes, unless
	// its holder had already sent its release (an unlock that too few nodes
	// confirmed, whose acquisition later ran out): no work went on under it.
	LeaseLost func(l LeaseLoss)
	// NodeError is called for each failed answer of a node to a lock
	// operation, and each answer later than the per-node timeout.
	NodeError func(e NodeFailure)
	// QuarantineEnter and QuarantineLeave are called when a node enters and
	// leaves the restart quarantine (WithRestartQuarantine), as this set
	// sees it; Close counts as leaving.
	QuarantineEnter func(node string, until time.Time)
	QuarantineLeave func(node string)
	// WaitStart and WaitStop bracket the wait of a LockContext (or
	// AcquireContext) call that found the lock taken, until it returns.
	WaitStart func(c Call)
	WaitStop  func(c Call)
}

// WithObserver has every lock operation of the set, and what its nodes do,
// reported to o (see [Observer]). Default nil: nothing is measured, at no
// cost.
func WithObserver(o *Observer) Option { return func(c *config) { c.observer = o } }

// Call is the call an Observer is told of.
type Call struct {
	Op Op
	// Primitive is "mutex", "semaphore", "rwmutex.read", "rwmutex.write",
	// "multi" or "idempotency" (an idempotency.Store's lock on a key).
	Primitive string
	// Name is the lock's name as given to its constructor: one per lock, so
	// never a metric label unless the set of names is small and fixed.
	Name string
}

// Op is what was called.
type Op string

// The calls reported. The primitives' other methods map onto them:
// AcquireContext and RLockContext are lock, ReleaseContext and
// RUnlockContext are unlock; the Try forms are trylock.
const (
	OpLock    Op = "lock"
	OpTryLock Op = "trylock"
	OpExtend  Op = "extend"
	OpUnlock  Op = "unlock"
)

// Result is what a call did.
type Result struct {
	Outcome Outcome
	Err     error // what the call returned
	// Attempts is the number of rounds sent to the nodes: for a lock, its
	// attempts (for a Semaphore, over all the permits it tried); for an
	// extend or unlock, 1, or 0 if nothing was sent.
	Attempts int
	// Duration runs from Start to Done, on the set's clock (WithClock).
	Duration time.Duration
	// FailedNodes are the nodes whose *mutex.NodeError the call's error
	// carries (with a Semaphore's, those of every permit it tried); nil on
	// success, even if some node failed (NodeError tells of those).
	FailedNodes []string
}

// Outcome classifies a call's result. An error that matches several gets
// the first of: mutex.ErrNodesUnavailable, the end of ctx or
// mutex.ErrClosed, then busy or not held.
type Outcome string

// The outcomes of calls.
const (
	OutcomeObtained    Outcome = "obtained"    // lock: obtained
	OutcomeExtended    Outcome = "extended"    // extend: done
	OutcomeReleased    Outcome = "released"    // unlock: a majority confirmed, or passed in the process
	OutcomeBusy        Outcome = "busy"        // lock: refused, another owner or waiters ahead had it
	OutcomeNotHeld     Outcome = "not_held"    // extend, unlock: mutex.ErrNotHeld
	OutcomeUnavailable Outcome = "unavailable" // mutex.ErrNodesUnavailable
	OutcomeCanceled    Outcome = "canceled"    // ctx ended first, or the set was closed
)

// Release is what an unlock ended: how long the acquisition was held (from
// the start of its winning attempt) and its validity left when the release
// started, negative when the work overran it (for a lease found lost, as the
// holder last knew it).
type Release struct {
	Held, ValidityLeft time.Duration
}

// LeaseLoss is an acquisition whose Lost channel closed.
type LeaseLoss struct {
	Primitive, Name string // as in Call
	Cause           LossCause
	Err             error // its LostCause
}

// LossCause says why a lease was lost.
type LossCause string

// The causes of a loss.
const (
	LossNotHeld     LossCause = "not_held"    // a majority no longer holds its token
	LossUnavailable LossCause = "unavailable" // renewals reached no majority in time
	LossClosed      LossCause = "closed"      // the set's Close released it
	// LossExpired: its validity ran out unrenewed (no WithAutoExtend, or
	// WithMaxExtends reached), or no renewal ran in time (a starved process).
	LossExpired LossCause = "expired"
)

// NodeFailure is one failed answer of a node.
type NodeFailure struct {
	Node string // its address, as in *mutex.NodeError
	// Type is "timeout" (no answer within the per-node timeout, or not sent
	// to a node that stopped answering), "connection", the code of a Redis
	// error reply ("READONLY", "NOAUTH", "WRONGTYPE", "ERR", ...), "reply"
	// (an answer of the wrong shape) or "other".
	Type string
	Err  error
}

// observer adapts an Observer to the engine's reports.
type observer struct{ o Observer }

// engineObserver returns o as the engine sees it: nil, not a nil inside an
// interface, when there is none.
func engineObserver(o *Observer) engine.Observer {
	if o == nil {
		return nil
	}
	return &observer{o: *o}
}

func call(c engine.Call) Call { return Call{Op: Op(c.Op), Primitive: c.Primitive, Name: c.Name} }

func (a *observer) Start(ctx context.Context, c engine.Call) context.Context {
	if a.o.Start != nil {
		if started := a.o.Start(ctx, call(c)); started != nil {
			return started
		}
	}
	return ctx
}

func (a *observer) Done(ctx context.Context, c engine.Call, r engine.Result) {
	if a.o.Done != nil {
		a.o.Done(ctx, call(c), Result{Outcome: outcome(Op(c.Op), r.Err), Err: r.Err, Attempts: r.Attempts,
			Duration: r.Duration, FailedNodes: r.FailedNodes})
	}
}

// outcome classifies the error of a call of op, as Outcome says.
func outcome(op Op, err error) Outcome {
	acquiring := op == OpLock || op == OpTryLock
	switch {
	case err == nil && acquiring:
		return OutcomeObtained
	case err == nil && op == OpExtend:
		return OutcomeExtended
	case err == nil:
		return OutcomeReleased
	case errors.Is(err, mutex.ErrNodesUnavailable):
		return OutcomeUnavailable
	case errors.Is(err, mutex.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	case acquiring:
		return OutcomeBusy
	}
	return OutcomeNotHeld
}

func (a *observer) Released(ctx context.Context, c engine.Call, held, left time.Duration) {
	if a.o.Released != nil {
		a.o.Released(ctx, call(c), Release{Held: held, ValidityLeft: left})
	}
}

func (a *observer) Lost(primitive, name string, err error) {
	if a.o.LeaseLost == nil {
		return
	}
	cause := LossExpired
	switch {
	case errors.Is(err, mutex.ErrClosed):
		cause = LossClosed
	case errors.Is(err, mutex.ErrNotHeld):
		cause = LossNotHeld
	case errors.Is(err, mutex.ErrNodesUnavailable):
		cause = LossUnavailable
	}
	a.o.LeaseLost(LeaseLoss{Primitive: primitive, Name: name, Cause: cause, Err: err})
}

func (a *observer) NodeFailed(addr string, err error) {
	if a.o.NodeError != nil {
		a.o.NodeError(NodeFailure{Node: addr, Type: failureType(err), Err: err})
	}
}

// failureType classifies a node's failure as NodeFailure.Type says.
func failureType(err error) string {
	var ne net.Error
	var re redis.Error
	switch {
	case errors.Is(err, mutex.ErrNodeTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()):
		return "timeout"
	case strings.HasPrefix(err.Error(), "NOAUTH"):
		return "NOAUTH" // a refusal the node explained after closing the connection
	case errors.As(err, &re) && !errors.Is(err, redis.ErrClosed):
		if word, _, _ := strings.Cut(re.Error(), " "); errorCode(word) {
			return word
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

// errorCode reports whether word, the first of a Redis error reply, is an
// error code: 1 to 16 capital letters.
func errorCode(word string) bool {
	return word != "" && len(word) <= 16 && strings.Trim(word, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") == ""
}

func (a *observer) QuarantineEnter(addr string, until time.Time) {
	if a.o.QuarantineEnter != nil {
		a.o.QuarantineEnter(addr, until)
	}
}

func (a *observer) QuarantineLeave(addr string) {
	if a.o.QuarantineLeave != nil {
		a.o.QuarantineLeave(addr)
	}
}

func (a *observer) WaitStart(primitive, name string) {
	if a.o.WaitStart != nil {
		a.o.WaitStart(Call{Op: OpLock, Primitive: primitive, Name: name})
	}
}

func (a *observer) WaitStop(primitive, name string) {
	if a.o.WaitStop != nil {
		a.o.WaitStop(Call{Op: OpLock, Primitive: primitive, Name: name})
	}
}
