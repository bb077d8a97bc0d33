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
