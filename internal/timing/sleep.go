package timing

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// Sleep blocks for d on c, or until ctx is done, whichever comes first. It
// returns nil after a full sleep and ctx.Err() when ctx ended it. A d <= 0
// returns at once (with ctx.Err() if ctx is already done).
func Sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil || d <= 0 {
		return err
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Timer returns the channel of a timer firing after d on c, and its stop.
func Timer(c clock.Clock, d time.Duration) (<-chan time.Time, func()) {
	t := c.NewTimer(d)
	return t.C(), func() { t.Stop() }
}

// CancelOnLoss returns a ctx derived from ctx that is cancelled, with
// cause() as its cause, as soon as lost is closed, and a stop func that
// cancels it and waits for the goroutine watching lost: the ctx of the work
// run under a lease (redlock's Do, package idempotency).
func CancelOnLoss(ctx context.Context, lost <-chan struct{}, cause func() error) (context.Context, func()) {
	work, cancel := context.WithCancelCause(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-lost:
			cancel(cause())
		case <-work.Done():
		}
	}()
	return work, func() {
		cancel(nil)
		<-watching
	}
}
