package mutex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// Semaphore is a counting semaphore on a quorum: at most limit holders of
// its permits at any time, in every process. Each permit is a lock of its
// own, so each has the Mutex's guarantees (majority, validity, rollback,
// leases, fencing, restart quarantine). Create it with
// redlock.(*Redlock).NewSemaphore; see docs/design.md, "Semaphore". It is
// safe for concurrent use; every acquisition returns its own Permit.
//
// Every Semaphore on a name must have the same limit: the nodes keep it while
// any permit lives, and refuse another with ErrInvalid; they forget it at
// most one TTL (the longest of its permits') after the last permit ended.
type Semaphore struct {
	set   *engine.Set
	name  string
	limit int
	opts  []Option
	err   error // bad input, returned by every call
	retry config
}

// Permit is one of a Semaphore's permits, held from a successful acquisition
// until ReleaseContext. Its methods are the Mutex's, for this permit.
type Permit struct{ m *Mutex }

func newSemaphore(set *engine.Set, name string, limit int, opts ...Option) *Semaphore {
	s := &Semaphore{set: set, name: name, limit: limit, opts: opts, retry: configure(opts)}
	switch {
	case name == "":
		s.err = invalid("mutex: empty semaphore name")
		return s
	case limit < 1:
		s.err = invalid("mutex: semaphore %q: limit %d must be at least 1", name, limit)
		return s
	case set != nil && set.Keys.Reserved(name):
		// Its permits would not collide, but Inspect and ForceUnlock of
		// the name that it extends would count them as that one's.
		s.err = invalid("mutex: semaphore %q: the name is reserved for the library's own bookkeeping; choose another name", name)
		return s
	}
	s.err = s.permit(0).err
	return s
}

// permit returns a new Mutex for permit i. Beside it, each node keeps the
// semaphore's limit (docs/design.md, "Semaphore"); on sharded nodes the
// permits and the limit record share the hash slot of the semaphore's key.
func (s *Semaphore) permit(i int) *Mutex {
	t := target{name: s.name + keyspace.PermitInfix + strconv.Itoa(i), reserved: true, primitive: "semaphore", observed: s.name}
	if s.set != nil {
		key := s.set.Keys.Prefix + s.name
		t.key = s.set.Keys.Permit(key, i)
		t.kind, t.record, t.limit, t.conflict = engine.PermitKind, s.set.Keys.Limit(key), s.limit, s.conflict
	}
	return build(s.set, t, s.opts)
}

// conflict is the error of a permit refused because the nodes hold another
// limit for the semaphore.
func (s *Semaphore) conflict(stored string) error {
	return engine.NewError(fmt.Sprintf("mutex: semaphore %q has limit %s on the nodes, this one asks for %d: every holder must use the same limit", s.name, stored, s.limit), ErrNotObtained, ErrInvalid)
}

// TryAcquireContext makes one attempt at each permit, from a random one on,
// until one is obtained. A failure matches ErrNotObtained, and also
// ErrContended when holders refused a permit, ErrNodesUnavailable when node
// failures, not holders, refused every permit, or ErrInvalid when the nodes
// hold another limit for the name.
func (s *Semaphore) TryAcquireContext(ctx context.Context) (*Permit, error) {
	if err := s.usable(ctx); err != nil {
		return nil, notObtained(err)
	}
	r := observe(ctx, s.set, engine.OpTryLock, "semaphore", s.name)
	p, err := s.tryEach(ctx, &r)
	r.done(err)
	return p, err
}

// AcquireContext waits until a permit is obtained, ctx ends or the tries of
// WithTries are used up, as LockContext does: it queues for every permit
// (for 8 of them, drawn anew every largest retry delay unless tries are
// limited, when the limit is higher) and is woken when one is released. The
// error on failure is TryAcquireContext's, joined with ctx's error, or the
// last permit's that used up its tries; it stops at once, with
// ErrNodesUnavailable, when too many nodes for a majority refuse this
// client's credentials or ACL permissions, as LockContext does.
func (s *Semaphore) AcquireContext(ctx context.Context) (*Permit, error) {
	if err := s.usable(ctx); err != nil {
		return nil, notObtained(err)
	}
	r := observe(ctx, s.set, engine.OpLock, "semaphore", s.name)
	p, err := s.acquire(ctx, &r)
	r.done(err)
	return p, err
}

func (s *Semaphore) acquire(ctx context.Context, r *report) (*Permit, error) {
	for {
		p, err := s.tryEach(ctx, r)
		if p != nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return p, err
		}
		r.startWaiting()
		p, err, final := s.queue(ctx, r)
		if p != nil || ctx.Err() != nil || s.retry.tries > 0 || final {
			return p, err // with WithTries, the queued permits used up theirs
		}
	}
}

// queuedPermits bounds the permits one AcquireContext call queues for at once.
const queuedPermits = 8

// queue waits in the queues of every permit (or of queuedPermits of them,
// for at most the largest retry delay unless tries are limited), keeps the
// first obtained and releases any other that came at the same time. final
// says that a permit's wait ended by itself, with no tries limited and
// before the wait's end: refused as no retry can help (the nodes refuse
// this client, another limit, Close).
func (s *Semaphore) queue(ctx context.Context, rep *report) (_ *Permit, last error, final bool) {
	n := min(s.limit, queuedPermits)
	wait, cancel := context.WithCancel(ctx)
	if n < s.limit && s.retry.tries == 0 {
		wait, cancel = context.WithTimeout(ctx, s.retry.retryDelayMax)
	}
	defer cancel()
	type result struct {
		m        *Mutex
		attempts int
		err      error
	}
	results := make(chan result, n)
	for _, i := range rand.Perm(s.limit)[:n] {
		m := s.permit(i)
		go func() {
			attempts, err := m.acquire(wait, 0, nil)
			results <- result{m, attempts, err}
		}()
	}
	var got *Mutex
	for range n {
		r := <-results
		rep.attempts += r.attempts
		switch {
		case r.err != nil:
			last, final = r.err, final || s.retry.tries == 0 && wait.Err() == nil
		case got == nil:
			got = r.m
			cancel() // the others leave their queues
		default: // obtained at the same moment as got: not needed
			_ = r.m.unlock(ctx, &report{}, nil) // untold: the call did not obtain it
		}
	}
	if got != nil {
		return &Permit{m: got}, nil, false
	}
	return nil, last, final
}

// tryEach tries every permit once, from a random one on.
func (s *Semaphore) tryEach(ctx context.Context, r *report) (*Permit, error) {
	first := rand.N(s.limit)
	var errs []error
	unavailable := true
	for k := range s.limit {
		m := s.permit((first + k) % s.limit)
		attempts, err := m.acquire(ctx, 1, nil)
		r.attempts += attempts
		if err == nil {
			return &Permit{m: m}, nil
		}
		r.noteFailed(err)
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return nil, err
		}
		unavailable = unavailable && errors.Is(err, ErrNodesUnavailable)
		errs = append(errs, err)
	}
	e := &permitsError{is: []error{ErrNotObtained}, permits: errs}
	if unavailable {
		e.is = append(e.is, ErrNodesUnavailable)
	}
	for _, some := range []error{ErrContended, ErrNodeTimeout, ErrQuarantined} { // as a Mutex's: some permit's or node's
		if slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, some) }) {
			e.is = append(e.is, some)
		}
	}
	return nil, e.describe(s.name, s.limit)
}

// permitsError is the failure of an attempt at every permit: it matches the
// values of is, and errors.As finds in the permits' errors what it looks
// for (their *NodeError values).
type permitsError struct {
	msg     string
	is      []error
	permits []error
}

func (e *permitsError) describe(name string, limit int) *permitsError {
	parts := make([]string, len(e.permits))
	for i, err := range e.permits {
		parts[i] = err.Error()
	}
	e.msg = "mutex: semaphore " + strconv.Quote(name) + ": no permit obtained, all " + strconv.Itoa(limit) +
		" held or unreachable: " + strings.Join(parts, "; ")
	return e
}

func (e *permitsError) Error() string { return e.msg }

func (e *permitsError) Is(target error) bool { return slices.Contains(e.is, target) }

// As finds target in a permit's error. There is no Unwrap: errors.Is must
// not match what only some permits' errors match.
func (e *permitsError) As(target any) bool {
	return slices.ContainsFunc(e.permits, func(err error) bool { return errors.As(err, target) })
}

func (s *Semaphore) usable(ctx context.Context) error {
	switch {
	case s == nil:
		return invalid("mutex: nil *Semaphore; create Semaphores with redlock.(*Redlock).NewSemaphore")
	case ctx == nil:
		return invalid("mutex: semaphore %q: nil context.Context", s.name)
	case s.err != nil:
		return s.err
	case s.limit < 1:
		return invalid("mutex: zero Semaphore; create Semaphores with redlock.(*Redlock).NewSemaphore")
	}
	return nil
}

// Limit returns the most permits held at once.
func (s *Semaphore) Limit() int { return s.limit }

// ExtendContext extends the permit as Mutex.ExtendContext does.
func (p *Permit) ExtendContext(ctx context.Context) error { return p.mutex().ExtendContext(ctx) }

// ReleaseContext releases the permit as Mutex.UnlockContext does.
func (p *Permit) ReleaseContext(ctx context.Context) error {
	if p.mutex() == nil {
		return invalid("mutex: nil or zero *Permit; permits come from a Semaphore's AcquireContext or TryAcquireContext")
	}
	return p.m.UnlockContext(ctx)
}

// Until returns the end of the permit's validity, as Mutex.Until does.
func (p *Permit) Until() time.Time { return p.mutex().Until() }

// Lost returns a channel closed when the permit is lost, as Mutex.Lost does.
func (p *Permit) Lost() <-chan struct{} { return p.mutex().Lost() }

// Done returns a channel closed when the permit's hold ends, released, lost or
// closed, as Mutex.Done does.
func (p *Permit) Done() <-chan struct{} { return p.mutex().Done() }

// LostCause returns why the permit was lost, as Mutex.LostCause does.
func (p *Permit) LostCause() error { return p.mutex().LostCause() }

// FencingToken returns the permit's fencing token, as Mutex.FencingToken
// does (WithFencing): one counter for every lock and permit of the set.
func (p *Permit) FencingToken() uint64 { return p.mutex().FencingToken() }

func (p *Permit) mutex() *Mutex {
	if p == nil {
		return nil
	}
	return p.m
}
