package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// keyset is the keys of a script call, also boxed once as command arguments.
type keyset struct {
	names []string
	args  []any
}

func newKeyset(names ...string) keyset { return keyset{names: names, args: node.BoxKeys(names)} }

// fanout is one script sent to some of a set's nodes, its answers counted
// by a round.Round as they arrive on the nodes' sender goroutines.
type fanout[T any] struct {
	round   *round.Round[T]
	cmds    []node.Cmd
	line    []any // the commands' EVALSHA line
	parse   func(i int, r node.Result) (quorum.Vote, T, error)
	set     *Set
	timeout time.Duration
	// A recycled fan-out goes back to pool once its reader and every command
	// sent are done with it (refs). A withdrawn command (Cmd.Cancel) stays
	// queued until its sender passes it: its fan-out is never recycled.
	pool *fanouts[T]
	refs atomic.Int32
}

// fanouts recycles the fan-outs of one answer type, with their rounds.
type fanouts[T any] struct{ sync.Pool }

var (
	acquireFanouts fanouts[grant]
	releaseFanouts fanouts[released]
)

// get returns a fan-out as newFanout does, recycled if one is free; its
// reader calls done once it no longer reads it.
func (p *fanouts[T]) get(s *Set, timeout time.Duration, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	f, _ := p.Get().(*fanout[T])
	if f == nil || f.round.Tally().N != len(s.Nodes) {
		f = newFanout(s, timeout, parse)
	} else {
		f.round.Reset(s.Clock, timeout)
		f.parse, f.set, f.timeout = parse, s, timeout
	}
	f.pool = p
	f.refs.Store(1)
	return f
}

// done gives up a reference: the reader's, or a command's once answered.
func (f *fanout[T]) done() {
	if f.pool == nil || f.refs.Add(-1) != 0 {
		return
	}
	clear(f.cmds)
	clear(f.line)
	f.line = f.line[:0]
	f.parse, f.set = nil, nil
	f.pool.Put(f)
}

func (f *fanout[T]) Sent(i int, at time.Time) { f.round.Sent(i, at) }

// Receive records node i's answer as parse reads it. A parse that returns
// Pending answers later itself, with answer (f may be recycled from then on).
func (f *fanout[T]) Receive(i int, r node.Result) {
	s, timeout := f.set, f.timeout
	v, val, err := f.parse(i, r)
	failure := err
	if v != quorum.Failed {
		failure = nil
	}
	s.answered(i, failure, r.Sent, timeout)
	if v != quorum.Pending {
		f.answer(i, v, val, err)
	}
}

func (f *fanout[T]) answer(i int, v quorum.Vote, val T, err error) {
	f.round.Answer(i, v, val, err)
	f.done()
}

// stalling says whether a fan-out may skip a node that has stopped
// answering (see failStalled): acquisitions and renewals may, releases must
// not (one must reach every node it may have to clean).
type stalling uint8

const (
	skipStalled stalling = iota
	queueBehindStalled
)

// send fans script out, with keys and args, to the nodes of s that want
// selects (nil: all); an unselected node votes No at once, unasked. parse
// reads each node's answer, within timeout of the command's departure.
func send[T any](s *Set, timeout time.Duration, st stalling, want func(i int) bool,
	script *node.Script, keys keyset, args []any, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	f := newFanout(s, timeout, parse)
	f.dispatch(s, timeout, st, want, script, keys, args)
	return f
}

// newFanout returns a fan-out whose answers parse reads, before anything is
// sent: a parse that needs the fan-out can be given it first.
func newFanout[T any](s *Set, timeout time.Duration, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	n := len(s.Nodes)
	f := &fanout[T]{cmds: make([]node.Cmd, n), parse: parse, set: s, timeout: timeout}
	f.round = round.New[T](n, s.Clock, timeout, f.stalled)
	return f
}

// stalled reports whether node i has not answered a command for longer than
// the timeout: a question still unsent to it then fails (round.New).
func (f *fanout[T]) stalled(i int) bool {
	_, stalled := f.set.Nodes[i].Stalled(f.timeout)
	return stalled
}

// dispatch sends the commands of send.
func (f *fanout[T]) dispatch(s *Set, timeout time.Duration, st stalling, want func(i int) bool,
	script *node.Script, keys keyset, args []any) {
	f.line = node.AppendEvalSHALine(f.line, script, keys.args, args)
	for i, nd := range s.Nodes {
		if want != nil && !want(i) {
			var zero T
			f.round.Answer(i, quorum.No, zero, nil)
			continue
		}
		if st == skipStalled && failStalled(s, f.round, i, i, timeout) {
			continue
		}
		c := &f.cmds[i]
		c.Script, c.Keys, c.KeyArgs, c.Args, c.Line, c.To, c.Index = script, keys.names, keys.args, args, f.line, f, i
		if f.pool != nil {
			f.refs.Add(1) // until answer
		}
		nd.Send(c)
	}
}

// failStalled records voter k of r as failed, unasked, if its node i has
// not answered a command for longer than timeout: nothing queues behind it.
func failStalled[T any](s *Set, r *round.Round[T], k, i int, timeout time.Duration) bool {
	waited, stalled := s.Nodes[i].Stalled(timeout)
	if stalled {
		err := fmt.Errorf("%w: none for %v; this command was not sent", s.Errors.NodeTimeout, waited.Round(time.Millisecond))
		s.answered(i, err, time.Time{}, 0)
		var zero T
		r.Answer(k, quorum.Failed, zero, err)
	}
	return stalled
}

// sent reports whether node i was sent the command.
func (f *fanout[T]) sent(i int) bool { return f.cmds[i].To != nil }

// discard is a Receiver for commands whose outcome nobody waits for.
type discard struct{}

func (discard) Sent(int, time.Time)      {}
func (discard) Receive(int, node.Result) {}

// sendAndForget queues script on node i, its outcome unread. unless, if
// not nil, withdraws it when true at the moment it would be sent.
func sendAndForget(s *Set, i int, script *node.Script, keys keyset, args []any, unless func() bool) {
	s.Nodes[i].Send(&node.Cmd{Script: script, Keys: keys.names, KeyArgs: keys.args, Args: args, To: discard{}, Index: i, Unless: unless})
}

// armed returns a timer's channel firing after d on s's clock, and its stop.
func armed(s *Set, d time.Duration) (<-chan time.Time, func()) {
	t := s.Clock.NewTimer(d)
	return t.C(), func() { t.Stop() }
}
