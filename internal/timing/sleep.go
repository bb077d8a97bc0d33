package timing

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

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
