package redlock

import (
	"context"
	"errors"
	"slices"

	"github.com/quorumlock/quorumlock/mutex"
)

// Do runs fn while holding the lock on name. It acquires the lock with the
// same rules as LockContext (retrying until ctx is done or the tries set in
// opts are used up), keeps it alive with automatic extensions
// (mutex.WithAutoExtend is added to opts), runs fn with a context that is
// cancelled, with cause mutex.ErrLost, as soon as the lock is lost or about to
// end without renewal, and releases the lock when fn returns (or panics).
//
// It returns the acquisition error if the lock was not obtained (fn does not
// run; a nil fn or ctx is refused with mutex.ErrInvalid before anything is sent), otherwise fn's error joined with the loss (an error matching mutex.ErrLost
// and its cause) if the lock was lost while fn ran, and with the release error
// if the release could not be confirmed on a majority. Do blocks until fn has
// returned and the release was confirmed by a majority (or failed); the
// lease's goroutine has ended by then, and only the releases still in flight
// to slower nodes complete in the background, bounded by the clients'
// timeouts.
func (r *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...mutex.Option) (err error) {
	if fn == nil {
		return invalid("redlock: Do %q: nil fn; nothing locked", name)
	}
	m := r.NewMutex(name, append(slices.Clone(opts), mutex.WithAutoExtend())...)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(ctx)
	lost := m.Lost()
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-lost:
			cancel(m.LostCause())
		case <-work.Done():
		}
	}()
	defer func() {
		cancel(nil)
		<-watching
		unlockErr := m.UnlockContext(context.WithoutCancel(ctx))
		lostErr := m.LostCause()
		if lostErr != nil && (errors.Is(unlockErr, mutex.ErrNotHeld) || errors.Is(unlockErr, mutex.ErrClosed)) {
			unlockErr = nil // the same loss, already reported
		}
		if errors.Is(err, mutex.ErrLost) {
			lostErr = nil // fn returned the loss itself (context.Cause)
		}
		err = errors.Join(err, lostErr, unlockErr)
	}()
	return fn(work)
}
