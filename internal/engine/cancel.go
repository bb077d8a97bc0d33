package engine

import "context"

// CancelOnLoss returns a ctx derived from ctx that is cancelled, with
// cause() as its cause, as soon as lost is closed, and a stop func that
// cancels it and waits for the goroutine watching lost: what redlock's Do
// and the idempotency store give the work they run under a lease.
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
