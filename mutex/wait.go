package mutex

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// wait sleeps before the next attempt: for d, or until w (if not nil) is
// woken by a release, or until ctx ends, in which case it returns ctx.Err().
func (m *Mutex) wait(ctx context.Context, d time.Duration, w *node.Waiter) error {
	var wake <-chan struct{}
	if w != nil {
		wake = w.Wake()
	}
	timer := m.set.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
