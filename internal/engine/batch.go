package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// maxKeysPerCall bounds the keys of one renew script call, so that a node
// is never blocked long by one call.
const maxKeysPerCall = 256

// batch is one round of renewals (docs/design.md, "Leases"): the renew
// script sent to every node for one or many leases at once, each lease
// decided from its nodes' answers as they arrive. The renewer's batches
// renew leases automatically; Extend's (r nil) extends one.
type batch struct {
	set     *Set
	r       *renewer
	start   time.Time
	timeout time.Duration
	leases  []renewal
	keys    []string // the leases' keys, in order
	chunks  []chunk
	cmds    []node.Cmd
	round   *round.Round[renewCodes] // one voter per chunk
	over    bool                     // collect has read all it will
}

// renewal is one lease's part of a batch.
type renewal struct {
	h         *Hold
	ext       extension
	restoreTo uint64 // the nodes asked to put a missing key back
	heard     int    // nodes that answered
	decided   bool
	err       error // Extend's outcome
}

// chunk is one script call: node's keys of leases[from:to], keys[k0:k1].
type chunk struct{ node, from, to, k0, k1 int }

// renewCodes is a node's answer to a call, key by key.
type renewCodes struct {
	codes []node.Renewal
	errs  []error // nil, or the error of each key (nil if none)
}

func newBatch(s *Set, r *renewer, holds []*Hold, now time.Time) *batch {
	n := len(holds)
	b := &batch{set: s, r: r, start: now, timeout: holds[0].lock.timeout(), leases: make([]renewal, n)}
	all := uint64(1)<<len(s.Nodes) - 1
	for i, h := range holds {
		b.leases[i] = renewal{h: h, ext: extension{unknown: all}}
		b.timeout = min(b.timeout, h.lock.timeout())
		b.keys = append(b.keys, h.lock.renewKeys.names...)
	}
	// A call carries leases of one kind (holds come grouped by kind), and
	// at most maxKeysPerCall keys on a node that takes many keys a call.
	for i, nd := range s.Nodes {
		per := 1
		if nd.MultiKey() {
			per = maxKeysPerCall
		}
		c := chunk{node: i}
		for from := 0; from < n; from = c.to {
			c.from, c.to, c.k0 = from, from, c.k1
			for c.to < n && (c.to == from || c.k1+len(holds[c.to].lock.renewKeys.names)-c.k0 <= per &&
				holds[c.to].lock.kind.Renew == holds[from].lock.kind.Renew) {
				c.k1 += len(holds[c.to].lock.renewKeys.names)
				c.to++
			}
			b.chunks = append(b.chunks, c)
		}
	}
	b.cmds = make([]node.Cmd, len(b.chunks))
	// A call still waiting to be sent waits on, unless its node has
	// stalled: it is then withdrawn, and fails.
	b.round = round.New[renewCodes](len(b.chunks), s.Clock, b.timeout)
	b.round.WatchUnsent(func(k int) bool {
		_, stalled := s.Nodes[b.chunks[k].node].Stalled(b.timeout)
		return stalled && b.cmds[k].Cancel()
	})
	return b
}

func (b *batch) Sent(k int, at time.Time) { b.round.Sent(k, at) }

// Receive reads call k's answer; a key's error fails the call when the call
// renews one lease (as Extend's do), and is that lease's alone otherwise.
func (b *batch) Receive(k int, r node.Result) {
	c := b.chunks[k]
	var rc renewCodes
	err := r.Err
	if err == nil {
		rc.codes, rc.errs, err = node.ParseRenew(r.Reply, c.to-c.from)
		if err == nil && rc.errs != nil && c.to-c.from == 1 {
			err = rc.errs[0]
		}
	}
	b.set.answered(c.node, err, r.Sent, b.timeout)
	vote := quorum.Yes // each lease's answer is read in collect
	if err != nil {
		vote = quorum.Failed
	}
	b.round.Answer(k, vote, rc, err)
}

// send queues the calls on the nodes; for the renewer, under its mu. The
// renewer's batches ask the nodes that are not holders to put a missing key
// back; never a holder: there a missing key is a loss to count, not to hide.
func (b *batch) send() {
	all := uint64(1)<<len(b.set.Nodes) - 1
	for i := range b.leases {
		if ls := &b.leases[i]; b.r != nil {
			ls.h.lock.mu.Lock()
			ls.restoreTo = all &^ ls.h.holders
			ls.h.lock.mu.Unlock()
		}
	}
	for k, c := range b.chunks {
		if failStalled(b.set, b.round, k, c.node, b.timeout) {
			continue
		}
		args := make([]any, 0, 4*(c.to-c.from))
		for _, ls := range b.leases[c.from:c.to] {
			restore := "0"
			if ls.restoreTo&(1<<c.node) != 0 {
				restore = "1"
			}
			args = ls.h.lock.appendRenewArgs(args, ls.h.token, restore)
		}
		cmd := &b.cmds[k]
		cmd.Script, cmd.Keys, cmd.Args, cmd.To, cmd.Index = b.leases[c.from].h.lock.kind.Renew, b.keys[c.k0:c.k1], args, b, k
		b.set.Nodes[c.node].Send(cmd)
	}
}

// collect reads the answers until every lease is decided (the renewer's:
// or lost, or released) or deadline fires (nil: never), then decides the
// leases left with what is known. It returns ctx's error, leaving them
// undecided, if ctx ends first.
func (b *batch) collect(ctx context.Context, deadline <-chan time.Time) error {
	read := 0
	readNew := func() bool {
		replies := b.round.Replies()
		for _, rep := range replies[read:] {
			b.answer(rep)
		}
		read = len(replies)
		return read == len(b.chunks) || b.settled()
	}
	if err := b.round.Until(ctx, deadline, readNew); err != nil && err != round.ErrDeadline {
		return err
	}
	readNew() // the failures the deadline recorded
	b.over = true
	for i := range b.leases {
		b.decide(i)
	}
	return nil
}

// settled reports whether no lease waits for the batch any more.
func (b *batch) settled() bool {
	for _, ls := range b.leases {
		if !ls.decided && (b.r == nil || ls.h.LostCause() == nil) {
			return false
		}
	}
	return true
}

// answer records a call's answer for each of its leases.
func (b *batch) answer(rep round.Reply[renewCodes]) {
	c := b.chunks[rep.Node]
	bit := uint64(1) << c.node
	for i := c.from; i < c.to; i++ {
		ls := &b.leases[i]
		ls.heard++
		e := &ls.ext
		if rep.Vote == quorum.Failed || rep.Value.errs != nil && rep.Value.errs[i-c.from] != nil {
			e.failed |= bit
		} else {
			e.unknown &^= bit
			switch rep.Value.codes[i-c.from] {
			case node.Extended:
				e.yes |= bit
			case node.Restored:
				e.restored |= bit
			default:
				e.gone |= bit
			}
		}
		b.decide(i)
	}
}

// decide settles lease i once its outcome is known, or with what is known
// once every node answered or the batch is over; Extend's also once its
// votes decide a round (quorum.Tally.Decided).
func (b *batch) decide(i int) {
	ls := &b.leases[i]
	if ls.decided {
		return
	}
	s, h, e := b.set, ls.h, ls.ext
	l := h.lock
	won, lost, possible := h.judge(e, s.Need())
	// A win waits for the nodes asked to put the key back: decided without
	// their answers, they would stay suspect.
	final := b.over || ls.heard == len(s.Nodes) || b.r == nil && e.tally(len(s.Nodes)).Decided()
	if !final && (!won && !lost || won && ls.restoreTo&e.unknown&^e.failed != 0) {
		return
	}
	ls.decided = true
	skip := false // the renewer's lease was released or lost meanwhile
	if b.r != nil {
		b.r.mu.Lock()
		skip = h.ended || h.LostCause() != nil
		b.r.mu.Unlock()
	}
	now := s.Clock.Now()
	elapsed := now.Sub(b.start)
	ok, gone := false, ""
	switch v := timing.Validity(l.spec.TTL, elapsed, s.DriftFactor); {
	case skip:
	case won && v > 0:
		h.extended(b.start, b.start.Add(v), e, ls.restoreTo)
		ok = true
	case won:
		gone = fmt.Sprintf("a majority answered after %v, which leaves no validity of the %v TTL", elapsed, l.spec.TTL)
	case lost:
		gone = fmt.Sprintf("only %d nodes can still hold its token, fewer than a majority; it expired or passed to another owner", possible)
	default:
		h.forget(e, ls.restoreTo)
	}
	if b.r == nil {
		ls.err = l.extendResult(b, h, e, ok, gone)
		return
	}
	var retryAt time.Time
	switch {
	case gone != "":
		h.foundLost(l.lostErr(s.Errors.NotHeld, gone))
	case !ok && !skip:
		deadline := h.Until().Add(-l.lossMargin())
		retryAt = now.Add(max(deadline.Sub(now)/4, l.spec.TTL/100))
	}
	b.r.finished(h, ok, retryAt)
}
