package mutex

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
)

// ReadersMax is the most readers an RWMutex admits at once.
const ReadersMax = 16

// RWMutex is a read-write lock on a quorum: many readers (up to ReadersMax)
// or one writer, in every process. Readers and writers pass a gate, first
// come, first served, so a stream of readers cannot starve a writer. It is
// made of locks, each with the Mutex's guarantees; see docs/design.md,
// "Read-write lock". Create it with redlock.(*Redlock).NewRWMutex. Like a
// Mutex it holds one acquisition (read or write) at a time and serializes
// its calls; give each goroutine its own RWMutex.
type RWMutex struct {
	set  *engine.Set
	name string
	opts []Option
	err  error

	op   sync.Mutex // one call at a time
	mu   sync.Mutex // guards what follows
	held []*Mutex   // the reader slot, or the gate and every slot
	lost chan struct{}
	stop chan struct{} // ends the loss watcher of a write hold
}

func newRWMutex(set *engine.Set, name string, opts ...Option) *RWMutex {
	rw := &RWMutex{set: set, name: name, opts: opts}
	if name == "" {
		rw.err = invalid("mutex: empty read-write lock name")
		return rw
	}
	rw.err = rw.part("gate").err
	return rw
}

// part returns a new Mutex for one of the lock's parts: "gate" or "read:<i>".
func (rw *RWMutex) part(what string) *Mutex {
	return build(rw.set, rw.name+engine.RWInfix+what, permitName, rw.opts)
}

func (rw *RWMutex) slot(i int) *Mutex { return rw.part("read:" + strconv.Itoa(i)) }

// RLockContext waits for a read lock until ctx ends, behind any writer that
// came first. Errors are LockContext's.
func (rw *RWMutex) RLockContext(ctx context.Context) error { return rw.rlock(ctx, waitFor) }

// TryRLockContext makes one attempt at a read lock.
func (rw *RWMutex) TryRLockContext(ctx context.Context) error { return rw.rlock(ctx, tryOnce) }

// LockContext waits for the write lock until ctx ends: it passes the gate,
// then waits for the readers inside to leave. Errors are LockContext's.
func (rw *RWMutex) LockContext(ctx context.Context) error { return rw.lock(ctx, waitFor) }

// TryLockContext makes one attempt at the write lock.
func (rw *RWMutex) TryLockContext(ctx context.Context) error { return rw.lock(ctx, tryOnce) }

// RUnlockContext releases a read lock, as UnlockContext does for a Mutex;
// ErrInvalid if this RWMutex holds the write lock.
func (rw *RWMutex) RUnlockContext(ctx context.Context) error { return rw.unlock(ctx, 1) }

// UnlockContext releases the write lock, as a Mutex's does; ErrInvalid if
// this RWMutex holds a read lock.
func (rw *RWMutex) UnlockContext(ctx context.Context) error { return rw.unlock(ctx, ReadersMax+1) }

// Until returns the end of the validity of the lock held (the earliest of
// its parts'), or the zero Time.
func (rw *RWMutex) Until() time.Time {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var until time.Time
	for _, m := range rw.held {
		if u := m.Until(); until.IsZero() || u.Before(until) {
			until = u
		}
	}
	return until
}

// Lost returns a channel closed when the lock held is lost (any of its
// parts), as a Mutex's Lost does; a channel never closed when none is held.
func (rw *RWMutex) Lost() <-chan struct{} {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.lost == nil {
		return never
	}
	return rw.lost
}

// mode says whether a call waits.
type mode uint8

const (
	waitFor mode = iota
	tryOnce
)

func (m mode) take(ctx context.Context, part *Mutex) error {
	if m == tryOnce {
		return part.TryLockContext(ctx)
	}
	return part.LockContext(ctx)
}

func (rw *RWMutex) usable(ctx context.Context) error {
	switch {
	case rw == nil:
		return invalid("mutex: nil *RWMutex; create RWMutexes with redlock.(*Redlock).NewRWMutex")
	case ctx == nil:
		return invalid("mutex: read-write lock %q: nil context.Context", rw.name)
	case rw.err != nil:
		return rw.err
	case rw.set == nil:
		return invalid("mutex: zero RWMutex; create RWMutexes with redlock.(*Redlock).NewRWMutex")
	}
	return nil
}

// begin takes the op slot for an acquisition, refusing when one is held.
func (rw *RWMutex) begin(ctx context.Context) error {
	if err := rw.usable(ctx); err != nil {
		return err
	}
	rw.op.Lock()
	if len(rw.held) > 0 {
		rw.op.Unlock()
		return engine.NewError("mutex: read-write lock "+strconv.Quote(rw.name)+": this RWMutex already holds it; unlock it first",
			ErrAlreadyHeld, ErrNotObtained)
	}
	return nil
}

func (rw *RWMutex) rlock(ctx context.Context, m mode) error {
	if err := rw.begin(ctx); err != nil {
		return err
	}
	defer rw.op.Unlock()
	gate := rw.part("gate")
	if err := m.take(ctx, gate); err != nil {
		return err
	}
	defer releaseQuietly(ctx, gate)
	first := rand.N(ReadersMax)
	for k := range ReadersMax {
		s := rw.slot((first + k) % ReadersMax)
		err := s.TryLockContext(ctx)
		if err == nil {
			rw.hold([]*Mutex{s})
			return nil
		}
		if !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNodesUnavailable) || ctx.Err() != nil {
			return err
		}
	}
	if m == tryOnce {
		return engine.NewError("mutex: read lock "+strconv.Quote(rw.name)+" not obtained: "+strconv.Itoa(ReadersMax)+" readers hold it", ErrNotObtained)
	}
	s := rw.slot(first) // every slot is a reader's: wait for this one
	if err := s.LockContext(ctx); err != nil {
		return err
	}
	rw.hold([]*Mutex{s})
	return nil
}

func (rw *RWMutex) lock(ctx context.Context, m mode) error {
	if err := rw.begin(ctx); err != nil {
		return err
	}
	defer rw.op.Unlock()
	parts := []*Mutex{rw.part("gate")}
	for i := range ReadersMax {
		parts = append(parts, rw.slot(i))
	}
	for k, p := range parts { // in this order only, so writers never deadlock
		if err := m.take(ctx, p); err != nil {
			for _, got := range parts[:k] {
				releaseQuietly(ctx, got)
			}
			return err
		}
	}
	rw.hold(parts)
	return nil
}

// releaseQuietly releases part, bounded by its TTL even once ctx is done;
// a failure leaves it to expire.
func releaseQuietly(ctx context.Context, part *Mutex) {
	release, cancel := context.WithTimeout(context.WithoutCancel(ctx), part.cfg.ttl)
	defer cancel()
	_ = part.UnlockContext(release)
}

// hold records the parts held, and watches them for a loss.
func (rw *RWMutex) hold(parts []*Mutex) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.held, rw.lost, rw.stop = parts, make(chan struct{}), make(chan struct{})
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(rw.stop)}}
	for _, p := range parts {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.Lost())})
	}
	lost := rw.lost
	go func() {
		if i, _, _ := reflect.Select(cases); i > 0 {
			close(lost)
		}
	}()
}

func (rw *RWMutex) unlock(ctx context.Context, parts int) error {
	if err := rw.usable(ctx); err != nil {
		return err
	}
	rw.op.Lock()
	defer rw.op.Unlock()
	rw.mu.Lock()
	held := rw.held
	rw.mu.Unlock()
	switch {
	case len(held) == 0:
		return engine.NewError("mutex: read-write lock "+strconv.Quote(rw.name)+": this RWMutex does not hold it", ErrNotHeld)
	case len(held) != parts && parts == 1:
		return invalid("mutex: read-write lock %q: RUnlock of the write lock; use UnlockContext", rw.name)
	case len(held) != parts:
		return invalid("mutex: read-write lock %q: Unlock of a read lock; use RUnlockContext", rw.name)
	}
	var errs []error
	for i := len(held) - 1; i >= 0; i-- {
		if err := held[i].UnlockContext(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	rw.mu.Lock()
	close(rw.stop)
	rw.held, rw.lost, rw.stop = nil, nil, nil
	rw.mu.Unlock()
	return errors.Join(errs...)
}
