package mutex

import "context"

// Settle blocks until every command sent to the nodes so far, including the
// releases queued behind late replies, has completed. Tests use it to
// observe the nodes once the background work of a call is over.
func (m *Mutex) Settle() { m.l.Set().Settle() }

// SettleRenewals blocks until no automatic renewal's answers are still
// being read.
func (m *Mutex) SettleRenewals() { m.l.Set().SettleRenewals() }

// Settle is Mutex.Settle for the node set of a Semaphore.
func (s *Semaphore) Settle() { s.set.Settle() }

// Attempts returns how many attempts the latest LockContext made.
func (m *Mutex) Attempts() int { return m.l.Attempts() }

// SetMetadata is setMetadata, for tests.
func (m *Mutex) SetMetadata(ctx context.Context, metadata string) error {
	return m.setMetadata(ctx, metadata)
}

// NotObtained is notObtained, for tests.
var NotObtained = notObtained
