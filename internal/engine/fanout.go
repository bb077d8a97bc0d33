package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// keyset is the keys of a script call, with the same keys boxed once as
// command arguments, so that the commands of a fan-out (and of every call
// on one lock) share them.
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
	// A recycled fan-out goes back to pool once its reader is done (done)
	// and every command sent has had its answer recorded (answer): refs
	// counts those still to come. A withdrawn command (Cmd.Cancel) stays
	// in its node's queue until the sender passes it: its fan-out is never
	// recycled.
	pool *fanouts[T]
	refs atomic.Int32
}

// fanouts recycles the fan-outs of one answer type, with their rounds:
// those of every acquire attempt and Release, one pair per lock+unlock.
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
		f.watchUnsent(s, timeout)
		f.parse, f.set, f.timeout = parse, s, timeout
	}
	f.pool = p
	f.refs.Store(1)
	return f
}

// done gives up one reference: the reader's once it no longer reads the
// fan-out, or a command's once its answer is recorded.
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
// Pending has taken it upon itself to answer later (after a round trip of
// its own), in its own goroutine, with answer.
func (f *fanout[T]) Receive(i int, r node.Result) {
	// Once parse returns Pending, its answer may come, and f be recycled,
	// at any moment: f is not read after it.
	s, timeout := f.set, f.timeout
	v, val, err := f.parse(i, r)
	if s.Observer != nil {
		failure := err
		if v != quorum.Failed {
			failure = nil
		}
		s.answered(i, failure, r.Sent, timeout)
	}
	if v != quorum.Pending {
		f.answer(i, v, val, err)
	}
}

// answer records the answer of node i, which was sent its command.
func (f *fanout[T]) answer(i int, v quorum.Vote, val T, err error) {
	f.round.Answer(i, v, val, err)
	f.done()
}

// stalling says whether a fan-out may skip a node that has stopped
// answering: acquisitions and renewals may (the node then counts as failed,
// and nothing queues behind it), releases must not (one must reach every
// node it may have to clean).
type stalling uint8

const (
	skipStalled stalling = iota
	queueBehindStalled
)

// send fans script out, with keys and args, to the nodes of s that want
// selects (nil: all); an unselected node votes skipped at once without being
// asked. Each node's answer is read by parse. Answers are read within
// timeout of each command's departure.
func send[T any](s *Set, timeout time.Duration, st stalling, want func(i int) bool, skipped quorum.Vote,
	script *node.Script, keys keyset, args []any, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	f := newFanout(s, timeout, parse)
	f.dispatch(s, timeout, st, want, skipped, script, keys, args)
	return f
}

// newFanout returns a fan-out whose answers parse reads, before anything is
// sent: a parse that needs the fan-out can be given it first.
func newFanout[T any](s *Set, timeout time.Duration, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	n := len(s.Nodes)
	f := &fanout[T]{round: round.New[T](n, s.Clock, timeout), cmds: make([]node.Cmd, n), parse: parse, set: s, timeout: timeout}
	f.watchUnsent(s, timeout)
	return f
}

func (f *fanout[T]) watchUnsent(s *Set, timeout time.Duration) {
	f.round.WatchUnsent(func(i int) bool {
		_, stalled := s.Nodes[i].Stalled(timeout)
		return stalled
	})
}

// dispatch sends the commands of send.
func (f *fanout[T]) dispatch(s *Set, timeout time.Duration, st stalling, want func(i int) bool, skipped quorum.Vote,
	script *node.Script, keys keyset, args []any) {
	f.line = node.AppendEvalSHALine(f.line, script, keys.args, args)
	for i, nd := range s.Nodes {
		var zero T
		switch {
		case want != nil && !want(i):
			f.round.Answer(i, skipped, zero, nil)
			continue
		case st == skipStalled:
			if waited, stalled := nd.Stalled(timeout); stalled {
				err := &stalledError{waited: waited}
				s.answered(i, err, time.Time{}, 0)
				f.round.Answer(i, quorum.Failed, zero, err)
				continue
			}
		}
		c := &f.cmds[i]
		c.Script, c.Keys, c.KeyArgs, c.Args, c.Line, c.To, c.Index = script, keys.names, keys.args, args, f.line, f, i
		if f.pool != nil {
			f.refs.Add(1) // until answer
		}
		nd.Send(c)
	}
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
