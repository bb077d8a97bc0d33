package engine

import (
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
	parse   func(i int, r node.Result) (quorum.Vote, T, error)
	set     *Set
	timeout time.Duration
}

func (f *fanout[T]) Sent(i int, at time.Time) { f.round.Sent(i, at) }

// Receive records node i's answer as parse reads it. A parse that returns
// Pending has taken it upon itself to answer later (after a round trip of
// its own), in its own goroutine.
func (f *fanout[T]) Receive(i int, r node.Result) {
	v, val, err := f.parse(i, r)
	if f.set.Observer != nil {
		failure := err
		if v != quorum.Failed {
			failure = nil
		}
		f.set.answered(i, failure, r.Sent, f.timeout)
	}
	if v != quorum.Pending {
		f.round.Answer(i, v, val, err)
	}
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
	f.round.WatchUnsent(func(i int) bool {
		_, stalled := s.Nodes[i].Stalled(timeout)
		return stalled
	})
	return f
}

// dispatch sends the commands of send.
func (f *fanout[T]) dispatch(s *Set, timeout time.Duration, st stalling, want func(i int) bool, skipped quorum.Vote,
	script *node.Script, keys keyset, args []any) {
	line := node.EvalSHALine(script, keys.args, args)
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
		c.Script, c.Keys, c.KeyArgs, c.Args, c.Line, c.To, c.Index = script, keys.names, keys.args, args, line, f, i
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
