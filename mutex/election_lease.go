package mutex

import "time"

// Until returns the end of the current leadership's validity, moved by each
// renewal, as Mutex.Until: work done as leader must end before it. Zero
// when this candidate does not lead.
func (e *Election) Until() time.Time { return e.leading().Until() }

// FencingToken returns the current leadership's fencing token, as
// Leader.FencingToken reports it to everyone; 0 when this candidate does
// not lead.
func (e *Election) FencingToken() uint64 { return e.leading().FencingToken() }

// LostCause returns nil, or why the current or last leadership was lost, as
// Mutex.LostCause reports it (after Done closed: ErrNodesUnavailable when
// renewals reached no majority, ErrNotHeld when another owner has the lock);
// nil too for a leadership resigned, or before the first.
func (e *Election) LostCause() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	m := e.m
	e.mu.Unlock()
	return m.LostCause() // nil for a nil m
}
