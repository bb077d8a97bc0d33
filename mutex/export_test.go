package mutex

// Settle blocks until every command sent to the nodes so far, including the
// releases queued behind late replies, has completed. Tests use it to
// observe the nodes once the background work of a call is over.
func (m *Mutex) Settle() { m.l.Set().Settle() }

// SettleRenewals blocks until no automatic renewal's answers are still
// being read.
func (m *Mutex) SettleRenewals() { m.l.Set().SettleRenewals() }

// Settle is Mutex.Settle for the permit's node set.
func (p *Permit) Settle() { p.m.Settle() }
