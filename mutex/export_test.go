package mutex

// Settle blocks until every command this Mutex has sent, including the
// releases queued behind late replies, has completed. Tests use it to observe
// the nodes once the background work of a call is over.
func (m *Mutex) Settle() {
	m.op <- struct{}{}
	defer func() { <-m.op }()
	for i := range m.lanes {
		if tail := m.lanes[i].tail; tail != nil {
			<-tail
		}
	}
}
