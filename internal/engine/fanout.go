package engine

import (
	"context"
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

// fanout is one script sent to a set's nodes, its answers counted by a round.
type fanout[T any] struct {
	round   *round.Round[T]
	cmds    []node.Cmd
	line    []any // the commands' EVALSHA line
	parse   func(i int, r node.Result) (quorum.Vote, T, error)
	set     *Set
	timeout time.Duration
	pool    *fanouts[T] // recycled once its reader and commands are done ("Per-node order")
	refs    atomic.Int32
}

// fanouts recycles the fan-outs of one answer type, with their rounds.
type fanouts[T any] struct{ sync.Pool }

var (
	acquireFanouts fanouts[node.Grant]
	releaseFanouts fanouts[released]
)

// newFanout returns a fan-out, nothing sent, whose answers parse reads;
// from pool (nil: none), and then its reader calls done once it stops reading.
func newFanout[T any](pool *fanouts[T], s *Set, timeout time.Duration, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	var f *fanout[T]
	if pool != nil {
		f, _ = pool.Get().(*fanout[T])
	}
	if n := len(s.Nodes); f == nil || f.round.Tally().N != n {
		f = &fanout[T]{cmds: make([]node.Cmd, n)}
		f.round = round.New[T](n, s.Clock, timeout, func(i int) bool {
			_, stalled := f.set.Nodes[i].Stalled(f.timeout, true) // a question still unsent to it then fails
			return stalled
		})
	} else {
		f.round.Reset(s.Clock, timeout)
	}
	f.parse, f.set, f.timeout, f.pool = parse, s, timeout, pool
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

// Receive records node i's answer as parse reads it; a failed command's
// error is the one recorded. A parse returning Pending calls answer later.
func (f *fanout[T]) Receive(i int, r node.Result) {
	s, timeout := f.set, f.timeout // read before parse: a Pending answer may recycle f
	v, val, err := f.parse(i, r)
	if v == quorum.Failed && r.Err != nil {
		err = r.Err
	}
	s.answered(i, err, r.Sent, timeout)
	if v != quorum.Pending {
		f.answer(i, v, val, err)
	}
}

func (f *fanout[T]) answer(i int, v quorum.Vote, val T, err error) {
	f.round.Answer(i, v, val, err)
	f.done()
}

// stalling says whether a fan-out may skip a node that stopped answering
// (failStalled): releases may not, since they must reach every node.
type stalling uint8

const (
	skipStalled stalling = iota
	queueBehindStalled
)

// send fans script out to the nodes want selects (nil: all; the others vote
// No, unasked); parse reads each answer, within timeout of its departure.
func send[T any](s *Set, timeout time.Duration, st stalling, want func(i int) bool,
	script *node.Script, keys keyset, args []any, parse func(int, node.Result) (quorum.Vote, T, error)) *fanout[T] {
	f := newFanout(nil, s, timeout, parse)
	f.dispatch(st, want, script, keys, args)
	return f
}

// dispatch sends the commands of send.
func (f *fanout[T]) dispatch(st stalling, want func(i int) bool, script *node.Script, keys keyset, args []any) {
	s, timeout := f.set, f.timeout
	f.line = node.AppendEvalSHALine(f.line, script, keys.args, args)
	for i, nd := range s.Nodes {
		if want != nil && !want(i) {
			f.round.Answer(i, quorum.No, *new(T), nil)
			continue
		}
		if st == skipStalled && failStalled(s, f.round, i, i, timeout, true, "; this command was not sent") {
			continue
		}
		c := &f.cmds[i]
		c.Script, c.Keys, c.KeyArgs, c.Args, c.Line, c.To, c.Index = script, keys.names, keys.args, args, f.line, f, i
		f.refs.Add(1) // until answer (read only when pooled)
		nd.Send(c)
	}
}

// decide is round.Decide; once ctx ended it, voters pending on stalled nodes fail.
func (f *fanout[T]) decide(ctx context.Context, deadline <-chan time.Time) error {
	err := f.round.Decide(ctx, deadline)
	if ctx.Err() != nil && !f.round.Tally().Decided() {
		for i := range f.set.Nodes {
			if f.round.Vote(i) == quorum.Pending {
				failStalled(f.set, f.round, i, i, f.timeout, true, " when ctx ended")
			}
		}
		_ = f.round.Decide(ctx, nil) // reads those answers: ctx is done
	}
	return err
}

// failStalled fails voter k of r, with why, if its node i has not answered
// for longer than timeout (node.Stalled): nothing queues behind it.
func failStalled[T any](s *Set, r *round.Round[T], k, i int, timeout time.Duration, patient bool, why string) bool {
	waited, stalled := s.Nodes[i].Stalled(timeout, patient)
	if stalled {
		err := fmt.Errorf("%w: none for %v%s", s.Errors.NodeTimeout, waited.Round(time.Millisecond), why)
		s.answered(i, err, time.Time{}, 0)
		r.Answer(k, quorum.Failed, *new(T), err)
	}
	return stalled
}

// vote is the vote of an answer that parsed with err, saying ok.
func vote(ok bool, err error) quorum.Vote {
	switch {
	case err != nil:
		return quorum.Failed
	case ok:
		return quorum.Yes
	}
	return quorum.No
}

// sent reports whether node i was sent the command.
func (f *fanout[T]) sent(i int) bool { return f.cmds[i].To != nil }
