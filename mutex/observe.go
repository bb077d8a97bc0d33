package mutex

import (
	"context"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/engine"
)

// report is one call being told to its node set's observer (see
// redlock.Observer). The zero report tells nothing, at no cost: without an
// observer nothing is measured or built.
type report struct {
	o        engine.Observer
	ctx      context.Context // what o.Start returned, for the ends of the call
	call     engine.Call
	clock    clock.Clock
	start    time.Time
	attempts int      // rounds sent to the nodes
	failed   []string // nodes that failed in rounds the call's error does not carry
	// Set when the call ended an acquisition: how long it was held, and
	// what was left of its validity when the release started.
	held, left time.Duration
	ended      bool
	waiting    bool // o was told the call waits
}

// observe starts telling set's observer, if it has one, of a call of op
// (engine.OpLock, OpTryLock, OpExtend or OpUnlock) on the lock name of the
// given primitive. Call done with the call's error before it returns.
func observe(ctx context.Context, set *engine.Set, op, primitive, name string) report {
	o := set.Observer
	if o == nil {
		return report{}
	}
	r := report{o: o, call: engine.Call{Op: op, Primitive: primitive, Name: name}, clock: set.Clock}
	r.start = set.Clock.Now()
	r.ctx = o.Start(ctx, r.call)
	return r
}

// observe starts telling of a call of op on m, as the primitive and name
// its lock is reported as (a read-write lock's hold as that lock's).
func (m *Mutex) observe(ctx context.Context, op string) report {
	set := m.l.Set()
	if set.Observer == nil {
		return report{}
	}
	primitive, name := m.l.ReportedAs()
	return observe(ctx, set, op, primitive, name)
}

// releasing records, before h's release, how long it was held and what is
// left of its validity.
func (r *report) releasing(h *engine.Hold) {
	if r.o == nil {
		return
	}
	now := r.clock.Now()
	r.held, r.left = now.Sub(h.Start()), h.Believed().Sub(now)
}

// released records whether the release ended the acquisition h of l: it did
// unless l still holds it (too few nodes answered: it may be retried).
func (r *report) released(l *engine.Contender, h *engine.Hold) {
	r.ended = r.o != nil && l.Current() != h
}

// startWaiting tells the observer, once, that the call waits.
func (r *report) startWaiting() {
	if r.o != nil && !r.waiting {
		r.waiting = true
		r.o.WaitStart(r.call.Primitive, r.call.Name)
	}
}

// noteFailed records the nodes err reports failed, for a call whose own
// error will not carry them.
func (r *report) noteFailed(err error) {
	if r.o != nil {
		r.failed = failedNodes(err, r.failed)
	}
}

// done tells the observer how the call ended, with err its error.
func (r *report) done(err error) {
	if r.o == nil {
		return
	}
	if r.waiting {
		r.o.WaitStop(r.call.Primitive, r.call.Name)
	}
	if r.ended {
		r.o.Released(r.ctx, r.call, r.held, r.left)
	}
	r.o.Done(r.ctx, r.call, engine.Result{
		Err: err, Attempts: r.attempts,
		Duration: r.clock.Since(r.start), FailedNodes: failedNodes(err, r.failed),
	})
}

// failedNodes adds to seen the nodes of the *NodeErrors in err's tree, each
// once, in order.
func failedNodes(err error, seen []string) []string {
	switch e := err.(type) {
	case nil:
	case *NodeError:
		if !slices.Contains(seen, e.Node) {
			seen = append(seen, e.Node)
		}
	case interface{ WrappedErrors() []error }: // *multierror.Error
		for _, err := range e.WrappedErrors() {
			seen = failedNodes(err, seen)
		}
	case interface{ Unwrap() []error }:
		for _, err := range e.Unwrap() {
			seen = failedNodes(err, seen)
		}
	case interface{ Unwrap() error }:
		seen = failedNodes(e.Unwrap(), seen)
	}
	return seen
}
