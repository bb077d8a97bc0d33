package redlock

// Settle blocks until every command sent to the nodes so far has completed,
// so that tests observe the nodes once a call's background work is over.
func (r *Redlock) Settle() { r.set.Settle() }
