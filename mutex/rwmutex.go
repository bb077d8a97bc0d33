package mutex

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// RWMutex is a read-write lock on a quorum: any number of readers or one
// writer, in every process. Callers that find it taken wait in one queue,
// first come, first served, so a stream of readers cannot starve a writer
// (docs/design.md, "Read-write lock"). Each hold, read or write, has the
// Mutex's guarantees. Create it with redlock.(*Redlock).NewRWMutex.
// It does not exclude a Mutex on the same name: their keys
// differ; lock one name with one type.
//
// Like a Mutex it holds one acquisition, read or write, at a time, and is
// safe for concurrent use: calls are serialized. Give each goroutine its own.
type RWMutex struct {
	name        string
	read, write *Mutex // the two holds, on one key
	err         error

	op   chan struct{} // one slot: the call in progress
	mu   sync.Mutex    // guards last
	last *Mutex        // the hold acquired last: read or write; nil before
}

func newRWMutex(set *engine.Set, name string, opts ...Option) *RWMutex {
	rw := &RWMutex{name: name, op: make(chan struct{}, 1)}
	if name == "" {
		rw.err = invalid("mutex: empty read-write lock name")
		return rw
	}
	if set != nil && set.Keys.Reserved(name) {
		rw.err = invalid("mutex: read-write lock %q: the key is reserved for the library's own bookkeeping; choose another name", name)
		return rw
	}
	hold := func(label string, k *engine.Kind) *Mutex {
		return build(set, target{name: label, names: []string{name + keyspace.RWSuffix}, kind: k, reserved: true, observed: name}, opts)
	}
	rw.read, rw.write = hold(name+" (read)", engine.RWReadKind), hold(name+" (write)", engine.RWWriteKind)
	if rw.err = rw.read.err; rw.err != nil { // an option's: the read-write lock's, not one hold's
		rw.err = hold(name, engine.RWReadKind).err
	}
	return rw
}

// RLockContext obtains a read lock, waiting until it succeeds, ctx is done or
// the tries of WithTries are used up; it waits behind a writer that holds the
// lock or came first. Errors are LockContext's.
func (rw *RWMutex) RLockContext(ctx context.Context) error { return rw.lock(ctx, reading, 0) }

// TryRLockContext makes one attempt at a read lock, as TryLockContext does.
func (rw *RWMutex) TryRLockContext(ctx context.Context) error { return rw.lock(ctx, reading, 1) }

// LockContext obtains the write lock, waiting until it succeeds, ctx is done
// or the tries of WithTries are used up: until the readers and the writer
// holding it leave, behind the callers that came first. Errors are
// Mutex.LockContext's.
func (rw *RWMutex) LockContext(ctx context.Context) error { return rw.lock(ctx, writing, 0) }

// TryLockContext makes one attempt at the write lock, as Mutex.TryLockContext.
func (rw *RWMutex) TryLockContext(ctx context.Context) error { return rw.lock(ctx, writing, 1) }

// RUnlockContext releases the read lock, as Mutex.UnlockContext does;
// ErrInvalid, with nothing sent, if this RWMutex holds the write lock.
func (rw *RWMutex) RUnlockContext(ctx context.Context) error { return rw.unlock(ctx, reading) }

// UnlockContext releases the write lock, as Mutex.UnlockContext does;
// ErrInvalid, with nothing sent, if this RWMutex holds a read lock.
func (rw *RWMutex) UnlockContext(ctx context.Context) error { return rw.unlock(ctx, writing) }

// ExtendContext extends the lock held, read or write, as Mutex.ExtendContext.
func (rw *RWMutex) ExtendContext(ctx context.Context) error {
	if err := rw.begin(ctx); err != nil {
		return err
	}
	defer rw.end()
	return rw.latest().ExtendContext(ctx)
}

// Until returns the end of the validity of the lock held, read or write, as
// Mutex.Until does; the zero Time when none is held.
func (rw *RWMutex) Until() time.Time { return rw.latest().Until() }

// Lost returns a channel closed when the lock held, read or write, is lost,
// as Mutex.Lost does; before the first acquisition it is never closed.
func (rw *RWMutex) Lost() <-chan struct{} { return rw.latest().Lost() }

// Done returns a channel closed when the lock held, read or write, ends, as
// Mutex.Done does.
func (rw *RWMutex) Done() <-chan struct{} { return rw.latest().Done() }

// LostCause returns why the lock held was lost, as Mutex.LostCause does.
func (rw *RWMutex) LostCause() error { return rw.latest().LostCause() }

// FencingToken returns the fencing number of the lock held, read or write,
// as Mutex.FencingToken does (WithFencing).
func (rw *RWMutex) FencingToken() uint64 { return rw.latest().FencingToken() }

// mode is a hold of a read-write lock.
type mode uint8

const (
	reading mode = iota
	writing
)

func (m mode) String() string {
	if m == writing {
		return "write"
	}
	return "read"
}

// holds returns the Mutex of the hold in mode, and that of the other one.
func (rw *RWMutex) holds(m mode) (this, other *Mutex) {
	if m == writing {
		return rw.write, rw.read
	}
	return rw.read, rw.write
}

// latest returns the hold acquired last, or a Mutex that never held one.
func (rw *RWMutex) latest() *Mutex {
	if rw == nil {
		return nil
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.last == nil {
		return rw.read
	}
	return rw.last
}

func (rw *RWMutex) lock(ctx context.Context, md mode, tries int) error {
	if err := rw.begin(ctx); err != nil {
		return notObtained(err)
	}
	defer rw.end()
	m, other := rw.holds(md)
	if other.current() != nil {
		return engine.NewError(fmt.Sprintf("mutex: read-write lock %q not obtained: this RWMutex holds its %v lock; unlock it first", rw.name, 1-md),
			ErrAlreadyHeld, ErrNotObtained)
	}
	err := m.lock(ctx, tries)
	if err == nil {
		rw.mu.Lock()
		rw.last = m
		rw.mu.Unlock()
	}
	return err
}

func (rw *RWMutex) unlock(ctx context.Context, md mode) error {
	if err := rw.begin(ctx); err != nil {
		return err
	}
	defer rw.end()
	m, other := rw.holds(md)
	if other.current() != nil {
		use := "UnlockContext"
		if md == writing {
			use = "RUnlockContext"
		}
		return invalid("mutex: read-write lock %q: this RWMutex holds its %v lock; release it with %s", rw.name, 1-md, use)
	}
	return m.UnlockContext(ctx)
}

// begin checks the input and takes the op slot, waiting for the call in
// progress while ctx lasts; end gives it back.
func (rw *RWMutex) begin(ctx context.Context) error {
	switch {
	case rw == nil:
		return invalid("mutex: nil *RWMutex; create RWMutexes with redlock.(*Redlock).NewRWMutex")
	case ctx == nil:
		return invalid("mutex: read-write lock %q: nil context.Context", rw.name)
	case rw.err != nil:
		return rw.err
	case rw.op == nil:
		return invalid("mutex: zero RWMutex; create RWMutexes with redlock.(*Redlock).NewRWMutex")
	}
	if err := take(ctx, rw.op); err != nil {
		return fmt.Errorf("mutex: read-write lock %q: another call on this RWMutex is in progress; nothing sent: %w", rw.name, err)
	}
	return nil
}

func (rw *RWMutex) end() { <-rw.op }

// take puts a token in slot (one call at a time, of a Mutex, RWMutex or
// Election), waiting for the call in progress to give it back, or until ctx
// ends (its error); a free slot is taken even if ctx has ended.
func take(ctx context.Context, slot chan struct{}) error {
	select {
	case slot <- struct{}{}:
		return nil
	default:
	}
	select {
	case slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
