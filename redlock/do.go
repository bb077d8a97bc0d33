package redlock

import (
	"context"
	"errors"
	"slices"

	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/mutex"
)

// Do runs fn while holding the lock on name: it acquires it as LockContext
// does, renews it (mutex.WithAutoExtend is added to opts) and releases it when
// fn returns or panics. fn's ctx is cancelled, with cause mutex.ErrLost, as
// soon as the lock is lost or about to end unrenewed. If the lock is not
// obtained, fn does not run and Do returns that error (mutex.ErrInvalid for a
// nil fn or ctx); otherwise fn's error joined with the loss and any release
// error. Do returns once a majority confirmed the release, or it failed, or
// ctx ended: the release then goes on in the background, and its error
// matches ctx's (docs/design.md, "Leases").
func (r *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...mutex.Option) (err error) {
	if fn == nil {
		return invalid("redlock: Do %q: nil fn; nothing locked", name)
	}
	m := r.NewMutex(name, append(slices.Clone(opts), mutex.WithAutoExtend())...)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	work, stop := timing.CancelOnLoss(ctx, m.Lost(), m.LostCause)
	defer func() {
		stop()
		unlockErr := m.UnlockContext(ctx)
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
