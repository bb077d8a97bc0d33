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

// fanout sends call to every node selected by mask (nil selects all), each
// command queued behind the previous one on its node's lane, and returns the
// round that collects the answers together with which nodes were sent a
// command. Nodes left out by mask vote No without being asked. With skipBusy,
// a node with maxInFlight commands outstanding is not sent anything and votes
// Failed with a *busyError: used for acquire and extend, which may skip a node,
// never for release, which must reach every node it might have to clean.
//
// The goroutine for node i ends when its command has completed; it is bounded
// by the client's own timeouts, not by the round. Only the goroutine holding
// the Mutex's op slot may call fanout.
func fanout[T any](m *Mutex, mask []bool, skipBusy bool, call func(*node.Node, *lane) (quorum.Vote, T, error)) (*quorum.Round[T], []bool) {
	n := len(m.set.Nodes)
	prev := make([]chan struct{}, n)
	done := make([]chan struct{}, n)
	sent := make([]bool, n)
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
		prev[i], done[i], sent[i] = l.tail, make(chan struct{}), true
		l.tail = done[i]
	}
	round := quorum.Ask(n, func(i int) (quorum.Vote, T, error) {
		var zero T
		l := &m.lanes[i]
		if !sent[i] {
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
			close(done[i])
		}()
		if prev[i] != nil {
			<-prev[i]
		}
		v, val, err := call(m.set.Nodes[i], l)
		if err != nil {
			l.lastErr.Store(&err)
		} else {
			l.lastErr.Store(nil)
		}
		l.lastVote.Store(uint32(v))
		return v, val, err
	})
	return round, sent
}
