package mutex

import "time"

// Until returns the end of the current leadership's validity, moved by each
// renewal, as Mutex.Until: work done as leader must end before it. Zero
// when this candidate does not lead.
func (e *Election) Until() time.Time {
	if m := e.leading(); m != nil {
		return m.Until()
	}
	return time.Time{}
}

// FencingToken returns the current leadership's fencing token, as
// Leader.FencingToken reports it to everyone; 0 when this candidate does
// not lead.
func (e *Election) FencingToken() uint64 {
	if m := e.leading(); m != nil {
		return m.FencingToken()
	}
	return 0
}
