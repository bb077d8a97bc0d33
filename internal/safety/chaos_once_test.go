package safety_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/mutex"
)

// The chaos clients' idempotency keys: few, so that calls with one key meet.
const (
	onceKeys = 3
	// onceRetention is the records' retention: no longer than a killed node
	// without persistence stays down (see nodeFaultLocked), so an empty
	// restart never loses a record that is still retained. Within that
	// fault model a completed key must never run again.
	onceRetention = maxChaosTTL
)

// onceSlack is what the oracle allows between the test's clock and the
// nodes' (record expiry) when it finds a key run again after its retention.
const onceSlack = 100 * time.Millisecond

// runOnce makes one call of the client's idempotency Store on a random key,
// bounded to 0.2 to 1s, and records its work, if it ran, as a section of
// kindOnce, Done when Do returned its response as completed.
func (c *client) runOnce(ctx context.Context, id string, record func(section), stats *clientStats) {
	key := fmt.Sprintf("chaos:once:%d", c.rng.IntN(onceKeys))
	d := time.Duration(c.rng.IntN(3000)) * time.Microsecond
	callCtx, cancel := context.WithTimeout(ctx, time.Duration(200+c.rng.IntN(800))*time.Millisecond)
	defer cancel()
	var s *section
	_, replayed, err := c.once.Do(callCtx, key, []byte("charge"), func(ctx context.Context) ([]byte, error) {
		if ctx.Err() != nil { // the lock was lost (or the call ended): no side effect
			return nil, context.Cause(ctx)
		}
		s = &section{Client: id, Name: key, Kind: kindOnce, Fence: idempotency.FencingToken(ctx), Enter: monoNow()}
		time.Sleep(d) // the work
		s.Exit = monoNow()
		s.Until = s.Exit // Do does not say; the work is short beside every TTL
		return fmt.Appendf(nil, "%s@%d", id, s.Enter), nil
	})
	if s != nil {
		s.Done = err == nil
		record(*s)
		stats.count(kindOnce)
	}
	switch {
	case err == nil && replayed:
		stats.replayed.Add(1)
	case errors.Is(err, idempotency.ErrInProgress):
		stats.held.Add(1)
	case errors.Is(err, mutex.ErrNodesUnavailable):
		stats.unavailable.Add(1)
	}
}

// onceViolations returns, for each key, every run of its work that started
// while a completed run's record was retained (from that run's start to its
// end plus the retention), or overlapped it: a completed key runs once.
func (o *oracle) onceViolations(retention time.Duration) []string {
	var found []string
	for name, ss := range o.byName() {
		for _, c := range ss {
			if c.kind() != kindOnce || !c.Done {
				continue
			}
			for _, e := range ss {
				if e != c && e.kind() == kindOnce && e.Exit > c.Enter && e.Enter < c.Exit+int64(retention-onceSlack) {
					found = append(found, fmt.Sprintf("%s: %s ran [%d, %d] although %s completed it [%d, %d], retained %v",
						name, e.Client, e.Enter, e.Exit, c.Client, c.Enter, c.Exit, retention))
				}
			}
		}
	}
	slices.Sort(found)
	return found
}
