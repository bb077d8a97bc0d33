package mutex

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/construct"
	"github.com/quorumlock/quorumlock/internal/engine"
)

// Mutex is a lock on one name (or, from redlock.(*Redlock).NewMultiMutex, on
// several at once), held on a majority of a node set's independent Redis
// primaries (the Redlock algorithm); Mutexes in any process locking a same
// name exclude each other. Create it with redlock.(*Redlock).NewMutex; the
// zero Mutex returns ErrInvalid.
//
// A Mutex holds one acquisition at a time, from a successful Lock until
// UnlockContext, and is not reentrant (ErrAlreadyHeld). It is safe for
// concurrent use: calls are serialized. Give each goroutine its own Mutex.
type Mutex struct {
	l    *engine.Contender
	name string
	cfg  config
	err  error         // bad configuration, returned by every call
	op   chan struct{} // one slot: the call in progress (take)
	cut  *engine.Hold  // released by an UnlockContext that ctx cut short; op slot
}

// init registers the constructors behind redlock's (see internal/construct).
// They send nothing and never fail: a bad name or option is reported by
// every method, matching ErrInvalid.
func init() {
	construct.Mutex = func(set *engine.Set, name string, opts ...Option) *Mutex {
		return build(set, target{name: name}, opts)
	}
	construct.Election = newElection
	construct.Semaphore = newSemaphore
	construct.RWMutex = newRWMutex
	construct.MultiMutex = newMultiMutex
	construct.ResumeMutex = newResumed
	construct.RecordedMutex = func(set *engine.Set, name string, kind *engine.Kind, record string, conflict func(string) error, opts ...Option) *Mutex {
		return build(set, target{name: name, kind: kind, record: record, conflict: conflict}, opts)
	}
	construct.UnlockWith = (*Mutex).unlockWith
}

// target is what a Mutex locks.
type target struct {
	name  string       // for Name and errors
	names []string     // the names whose keys it takes; nil: name
	key   string       // its key, if not the key prefix then name (a permit's)
	kind  *engine.Kind // nil: engine.MutexKind
	// reserved: the keys are the library's own (a permit, a read-write
	// lock's key), so they may be reserved names.
	reserved bool
	// reading: only read, never held (an Election's Leader and Observe), so
	// its TTL need not be within the restart quarantine.
	reading bool
	// primitive and observed are what observers are told it is; "": the
	// kind's name, and name.
	primitive, observed string
	// record, limit and conflict: a permit's semaphore's limit record, as
	// engine.Spec's Record, Limit and Conflict.
	record   string
	limit    int
	conflict func(stored string) error
}

func build(set *engine.Set, t target, opts []Option) *Mutex {
	m := &Mutex{name: t.name, cfg: configure(opts), op: make(chan struct{}, 1)}
	m.err = m.check(set, t)
	if m.err == nil {
		c := m.cfg
		var metadata string
		if c.metadata != nil {
			t.kind, t.primitive, metadata = engine.MetaKind, engine.MutexKind.Name, *c.metadata
			t.record = set.Keys.Metadata(set.Keys.Prefix + t.name)
		}
		m.l = engine.NewContender(set, engine.Spec{
			Kind: t.kind, Name: t.name, Names: t.names, Key: t.key, Primitive: t.primitive, Observed: t.observed,
			TTL: c.ttl.Truncate(time.Millisecond), RetryMin: c.retryDelayMin, RetryMax: c.retryDelayMax,
			AutoExtend: c.autoExtend, ExtendInterval: c.extendInterval, MaxExtends: c.maxExtends,
			Fencing: c.fencing, Record: t.record, Limit: t.limit, Conflict: t.conflict, Metadata: metadata,
		})
	}
	return m
}

// Name returns the lock's name, as given to NewMutex; for a lock on several
// names, the names in sorted order joined by " + ".
func (m *Mutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Key returns the Redis key the lock uses on every node: the set's key prefix
// followed by the name (for several names, the first in sorted order).
func (m *Mutex) Key() string {
	if m == nil || m.l == nil {
		return ""
	}
	return m.l.Key()
}

// Value returns the random token of the latest acquisition, which the lock
// key holds on the nodes; "" before the first. Each acquisition draws a new one.
func (m *Mutex) Value() string {
	if h := m.latest(); h != nil {
		return h.Token()
	}
	return ""
}

// Until returns the end of the lock's validity, moved by each extension: work
// under the lock must end before it. It is zero when the Mutex holds nothing
// or the lock was found lost to another owner; after a loss for want of nodes
// it keeps the validity's end, which may still be ahead: such a loss is
// declared a tenth of the TTL before it (docs/design.md, "Leases").
func (m *Mutex) Until() time.Time {
	if h := m.current(); h != nil {
		return h.Until()
	}
	return time.Time{}
}

// LockContext obtains the lock, retrying until it succeeds, ctx is done or the
// tries of WithTries are used up (no limit by default: without a deadline on
// ctx it may block for ever); it stops at once, with ErrNodesUnavailable, when
// too many nodes for a majority refuse this client's credentials or ACL
// permissions (NOAUTH, WRONGPASS, NOPERM), which waiting does not change. Callers that find it taken wait their turn, first
// come first served across processes (docs/design.md, "Waiting"). It returns
// as soon as ctx ends, whatever the nodes do; what it took is then released
// in the background (docs/design.md, "Rollback").
//
// Every error matches ErrNotObtained; also ErrContended when the nodes said
// the lock is busy, ErrNodesUnavailable when fewer than a majority of nodes
// answered, ctx.Err() when ctx ended the wait, and, with nothing sent,
// ErrAlreadyHeld, ErrInvalid or ErrClosed. Each failed node adds a *NodeError.
func (m *Mutex) LockContext(ctx context.Context) error { return m.lock(ctx, 0) }

// TryLockContext makes one attempt, as LockContext with WithTries(1) and with
// its errors, and fails if others wait for the lock. It blocks at most about
// twice the per-node timeout (three times with WithFencing), plus any wait for
// another attempt on the same name in this process, and never past ctx.
func (m *Mutex) TryLockContext(ctx context.Context) error { return m.lock(ctx, 1) }

// lock obtains the lock in at most tries attempts; 0: those of WithTries.
func (m *Mutex) lock(ctx context.Context, tries int) error {
	if err := m.usable(ctx); err != nil {
		return notObtained(err)
	}
	op := engine.OpLock // tries is 0 for LockContext, whatever WithTries says
	if tries == 1 {
		op = engine.OpTryLock
	}
	r := m.observe(ctx, op)
	var waiting func()
	if r.o != nil {
		waiting = r.startWaiting
	}
	var err error
	r.attempts, err = m.acquire(ctx, tries, waiting)
	r.done(err)
	return err
}

// acquire is lock on a usable Mutex, untold but for waiting (see
// engine.Contender.Acquire): it returns the attempts made.
func (m *Mutex) acquire(ctx context.Context, tries int, waiting func()) (int, error) {
	if err := m.l.Set().ErrIfClosed("mutex: lock %q not obtained: the node set was closed; nothing sent", m.name, ErrNotObtained); err != nil {
		return 0, err
	}
	if tries == 0 {
		tries = m.cfg.tries
	}
	if err := take(ctx, m.op); err != nil {
		return 0, engine.WithCtx(engine.NewError(fmt.Sprintf("mutex: lock %q not obtained: another call on this Mutex is in progress", m.name), ErrNotObtained), err)
	}
	defer m.end()
	if h := m.l.Current(); h != nil {
		return 0, engine.NewError(fmt.Sprintf("mutex: lock %q not obtained: this Mutex holds an acquisition that UnlockContext has not released (%s); unlock it first", m.name, m.describeValidity(h)),
			ErrAlreadyHeld, ErrNotObtained)
	}
	if err := ctx.Err(); err != nil {
		return 0, engine.WithCtx(engine.NewError(fmt.Sprintf("mutex: lock %q not obtained: nothing sent", m.name), ErrNotObtained), err)
	}
	err := m.l.Acquire(ctx, tries, waiting)
	return m.l.Attempts(), err
}

// ExtendContext resets the TTL to the full TTL on the nodes whose key still
// holds this Mutex's token (the Redlock spec's token-checked PEXPIRE; a missing
// key is never recreated) and moves Until. It waits at most the per-node
// timeout, less if ctx ends first (its error is then joined).
//
// Errors: ErrNotHeld when the Mutex holds nothing, Lost has closed (also
// ErrLost; nothing sent), fewer than a majority can still hold its token
// (Lost closes) or no validity is left;
// ErrNodesUnavailable when too few nodes answered (Until unchanged). A failed
// Extend releases nothing: call UnlockContext to clean up.
func (m *Mutex) ExtendContext(ctx context.Context) error {
	if err := m.usable(ctx); err != nil {
		return err
	}
	r := m.observe(ctx, engine.OpExtend)
	err := m.extend(ctx, &r)
	r.done(err)
	return err
}

func (m *Mutex) extend(ctx context.Context, r *report) error {
	if err := m.l.Set().ErrIfClosed("mutex: extend %q: the node set was closed; nothing sent", m.name); err != nil {
		return err
	}
	if err := take(ctx, m.op); err != nil {
		return fmt.Errorf("mutex: extend %q: another call on this Mutex is in progress: %w", m.name, err)
	}
	defer m.end()
	h := m.l.Current()
	if h == nil {
		return m.holdsNothing("extend")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mutex: extend %q: nothing sent: %w", m.name, err)
	}
	r.attempts = 1
	return m.l.Extend(ctx, h)
}

// UnlockContext releases the lock: a token-checked delete on every node, sent
// even when ctx is done. It returns once a majority confirmed, or a per-node
// timeout after the commands left, or when ctx ends (docs/design.md, "Unlock").
// nil: no other owner can have held the lock since this Mutex obtained it (or
// it was passed, nothing sent, to a LockContext waiting on the name in this
// Redlock). ErrNotHeld: nothing was held (nothing sent), or the lock was lost
// and the work may have overlapped another owner's. ErrNodesUnavailable: too
// few nodes answered. ctx's error: ctx ended first (the release goes on in the
// background and may free the lock at once), or another call was in progress
// (nothing sent). After those two, if the release was sent, Done closes at
// once and the Mutex keeps the acquisition until a majority confirms a
// release: do no more work under it (another owner may get the lock as soon
// as the nodes answer), retry to confirm. A retry is confirmed by the
// tombstones the release leaves for min(TTL, 2s) where it ran, whoever took
// the lock since; after that, with another owner in between, it gets
// ErrNotHeld (docs/design.md, "Unlock"). After anything else the Mutex
// holds nothing.
func (m *Mutex) UnlockContext(ctx context.Context) error {
	if err := m.usable(ctx); err != nil {
		return err
	}
	return m.unlockWith(ctx, nil)
}

// unlockWith is UnlockContext, with extra after the release script's
// arguments (engine.Contender.Release).
func (m *Mutex) unlockWith(ctx context.Context, extra []any) error {
	r := m.observe(ctx, engine.OpUnlock)
	err := m.unlock(ctx, &r, extra)
	r.done(err)
	return err
}

func (m *Mutex) unlock(ctx context.Context, r *report, extra []any) error {
	if err := m.l.Set().ErrIfClosed("mutex: unlock %q: the node set was closed, which released the lock if this Mutex held it; nothing sent", m.name); err != nil {
		return err
	}
	if err := take(ctx, m.op); err != nil {
		return fmt.Errorf("mutex: unlock %q: another call on this Mutex is in progress; nothing sent, the lock is still held: %w", m.name, err)
	}
	defer m.end()
	h, cut := m.l.Current(), m.cut
	m.cut = nil
	switch {
	case h == nil && cut != nil && cut == m.l.Latest() && cut.LostCause() == nil:
		return nil // the release cut short was confirmed in the background: a retry's answer
	case h == nil:
		return m.holdsNothing("unlock")
	}
	r.attempts = 1
	r.releasing(h)
	err := m.l.Release(ctx, h, extra...)
	r.released(m.l, h)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		m.cut = h
	}
	return err
}

// Lost returns a channel closed when the current acquisition is lost: at once
// when an extension or UnlockContext finds that fewer than a majority can
// still hold the token, or the set's Close released it; else at Until minus
// TTL/10 unless an extension moved Until; a look after that (Lost, Done,
// ExtendContext) finds it closed, even in a process that was paused. Work under the lock should select on
// it and stop. Once it is closed, renewals have stopped. A normal UnlockContext
// does not close it (a goroutine that only waits on it outlives the hold: use
// Done); each acquisition gets a new one, and before the first it is never
// closed. LostCause says why (docs/design.md, "Leases").
func (m *Mutex) Lost() <-chan struct{} {
	if h := m.latest(); h != nil {
		return h.Lost()
	}
	return never
}

// never is the Lost channel of a Mutex that has never held a lock.
var never = make(chan struct{})

// Done returns a channel closed when the current acquisition ends, whichever
// way: UnlockContext released it (nil or ErrNotHeld) or sent a release it
// could not confirm (ErrNodesUnavailable, ctx's error), it was lost (Lost
// closes too) or the set's Close released it. A goroutine watching the hold
// should wait on Done, which Lost alone does not replace. Each acquisition
// gets a new one; before the first, the channel is already closed.
func (m *Mutex) Done() <-chan struct{} {
	if h := m.latest(); h != nil {
		h.Lost() // watched, so that Done closes at the loss deadline
		return h.Done()
	}
	return ended
}

// ended is the Done channel of a Mutex that has never held a lock.
var ended = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// LostCause returns nil, or why the current acquisition was lost: an error
// matching ErrLost and wrapping ErrNotHeld (a majority no longer holds the
// token), ErrNodesUnavailable (renewals reached no majority before the
// validity ended, while this process ran its goroutines promptly; with a
// *NodeError per node that failed the latest renewal) or
// ErrClosed (the node set's Close released it); or ErrLost alone, saying
// why (nothing renewed it, WithMaxExtends was reached, or this process was
// paused or starved of CPU: no node is blamed for its delays).
func (m *Mutex) LostCause() error {
	if h := m.latest(); h != nil {
		return h.LostCause()
	}
	return nil
}

// FencingToken returns the fencing number of the held acquisition, strictly
// increasing across successive holders of any lock of the node set: the
// protected resource should refuse writes carrying a number smaller than one
// it has seen. 0 without WithFencing or when nothing is held.
func (m *Mutex) FencingToken() uint64 {
	if h := m.current(); h != nil {
		return h.Fence()
	}
	return 0
}

func (m *Mutex) current() *engine.Hold {
	if m == nil || m.l == nil {
		return nil
	}
	return m.l.Current()
}

func (m *Mutex) latest() *engine.Hold {
	if m == nil || m.l == nil {
		return nil
	}
	return m.l.Latest()
}

// usable returns why the Mutex cannot be used with ctx, if it cannot: a nil
// ctx or Mutex, bad configuration, or a zero Mutex that no constructor made.
func (m *Mutex) usable(ctx context.Context) error {
	switch {
	case m == nil:
		return invalid("mutex: nil *Mutex; create Mutexes with redlock.(*Redlock).NewMutex")
	case ctx == nil:
		return invalid("mutex: %q: nil context.Context; pass context.Background() or a request's ctx", m.name)
	case m.err != nil:
		return m.err
	case m.l == nil:
		return invalid("mutex: zero Mutex; create Mutexes with redlock.(*Redlock).NewMutex")
	}
	return nil
}

func (m *Mutex) end() { <-m.op }

// describeValidity says, for errors, where a held acquisition's validity
// stands.
func (m *Mutex) describeValidity(h *engine.Hold) string {
	until := h.Until()
	switch {
	case until.IsZero():
		return "found lost"
	case m.l.Set().Clock.Now().Before(until):
		return "valid until " + until.Format(time.RFC3339Nano)
	}
	return "validity ended " + until.Format(time.RFC3339Nano)
}

// invalid reports bad input; from acquisition calls it also matches
// ErrNotObtained.
func invalid(format string, args ...any) error {
	return engine.NewError(fmt.Sprintf(format, args...), ErrInvalid)
}

// notObtained adds ErrNotObtained to what err matches, keeping err's
// message and everything it wraps (ctx's error, a cause under a wrapper).
func notObtained(err error) error {
	if oe, ok := err.(*engine.OpError); ok {
		return oe.Also(ErrNotObtained)
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, err)
}

// holdsNothing is the ErrNotHeld of op on a lock that holds nothing, named
// as its caller knows it (a permit's semaphore, a read-write lock).
func (m *Mutex) holdsNothing(op string) error {
	_, name := m.l.ReportedAs()
	return engine.NewError(fmt.Sprintf("mutex: %s %q: nothing held (never obtained, or already released)", op, name), ErrNotHeld)
}
