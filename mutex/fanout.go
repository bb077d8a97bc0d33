package mutex

import (
	"fmt"
	"sync/atomic"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// maxInFlight is how many commands one Mutex may have queued or running on one
// node before acquire and extend skip that node. It keeps a paused or
// black-holed node from collecting a stuck goroutine per attempt, while a
// healthy node whose last reply is simply not read yet is still waited for.
const maxInFlight = 4

// busyError is the failure recorded, without sending anything, for a node that
// already has maxInFlight commands from this Mutex outstanding. It carries the
// node's last error, if any, so the cause stays visible.
type busyError struct{ last error }

func (e *busyError) Error() string {
	msg := fmt.Sprintf("too many earlier commands to this node (%d from this Mutex, or %d from all) have not completed; nothing sent", maxInFlight, node.MaxInFlight)
	if e.last != nil {
		msg += " (last error: " + e.last.Error() + ")"
	}
	return msg
}

func (e *busyError) Unwrap() error { return e.last }

// lane serializes the commands one Mutex sends to one node. Every command waits
// until the previous one sent to the same node has completed (replied, failed,
// or hit the client's own timeout), so a release can never overtake the acquire
// or extend it is meant to undo, even when the round that sent that acquire
// stopped waiting for it long ago.
type lane struct {
	tail     chan struct{}         // closed when the last command sent has completed; nil before the first
	inFlight atomic.Int32          // commands queued or running
	lastErr  atomic.Pointer[error] // the latest command's error; nil after a success
	lastVote atomic.Uint32         // the latest completed command's quorum.Vote
}

// previous returns the vote of the last command completed on the lane. Called
// from a command's goroutine after it waited for its predecessor, it is that
// predecessor's vote.
func (l *lane) previous() quorum.Vote { return quorum.Vote(l.lastVote.Load()) }

// sends records, per node, the command a fanout queued: the lane's tail it
// waits for and the channel it closes when done; a nil done means nothing was
// sent to that node.
type sends []struct{ prev, done chan struct{} }

func (s sends) sent(i int) bool { return s[i].done != nil }

// fanout sends call to every node selected by mask (nil selects all), each
// command queued behind the previous one on its node's lane, and returns the
// round that collects the answers together with what was sent where. Nodes
// left out by mask vote No without being asked. With skipBusy, a node with
// too many commands outstanding (maxInFlight from this Mutex, or
// node.MaxInFlight from all) is not sent anything and votes Failed with a
// *busyError: used for acquire and extend, which may skip a node, never for
// release, which must reach every node it might have to clean.
//
// The goroutine for node i ends when its command has completed; it is bounded
// by the client's own timeouts, not by the round. Only the goroutine holding
// the Mutex's op slot may call fanout.
func fanout[T any](m *Mutex, mask []bool, skipBusy bool, call func(*node.Node, *lane) (quorum.Vote, T, error)) (*quorum.Round[T], sends) {
	n := len(m.set.Nodes)
	ss := make(sends, n)
	for i := range n {
		l := &m.lanes[i]
		if mask != nil && !mask[i] {
			continue
		}
		if skipBusy && (l.inFlight.Load() >= maxInFlight || m.set.Nodes[i].Busy()) {
			continue
		}
		l.inFlight.Add(1)
		m.set.Nodes[i].Begin()
		ss[i].prev, ss[i].done = l.tail, make(chan struct{})
		l.tail = ss[i].done
	}
	round := quorum.Ask(n, func(i int) (quorum.Vote, T, error) {
		var zero T
		l := &m.lanes[i]
		s := ss[i]
		if s.done == nil {
			if mask != nil && !mask[i] {
				return quorum.No, zero, nil
			}
			var last error
			if p := l.lastErr.Load(); p != nil {
				last = *p
			}
			return quorum.Failed, zero, &busyError{last: last}
		}
		defer func() {
			l.inFlight.Add(-1)
			m.set.Nodes[i].End()
			close(s.done)
		}()
		if s.prev != nil {
			<-s.prev
		}
		v, val, err := call(m.set.Nodes[i], l)
		if err != nil {
			last := err // only a failure's error escapes to the heap
			l.lastErr.Store(&last)
		} else if l.lastErr.Load() != nil {
			l.lastErr.Store(nil)
		}
		l.lastVote.Store(uint32(v))
		return v, val, err
	})
	return round, ss
}
