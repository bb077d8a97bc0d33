package engine

import (
	"context"
	"fmt"
	"math/bits"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// maxKeysPerCall bounds the keys of a renew script call: no node is blocked long by one.
const maxKeysPerCall = 256

// batch is one round of renewals ("Leases") of one or many leases (Extend's:
// one, r nil), each decided from its nodes' answers as they arrive.
type batch struct {
	set     *Set
	r       *renewer
	start   time.Time
	timeout time.Duration
	leases  []renewal
	read    int // answers read
	chunks  []chunk
	cmds    []node.Cmd
	round   *round.Round[renewCodes] // one voter per chunk
}

// renewal is one lease's part of a batch.
type renewal struct {
	h         *Hold
	ext       extension
	restoreTo uint64    // the nodes asked to put a missing key back
	wonAt     time.Time // when a majority had extended it, if it then waited for restores
	decided   bool
	ok        bool   // extended
	gone      string // why it was found lost, if it was
	late      bool   // lost to a majority's extension that left no validity
}

var restoreArg = [2]string{"0", "1"} // the renew script's "put a missing key back"

// chunk is one script call: node's keys of leases[from:to].
type chunk struct{ node, from, to int }

// renewCodes is a node's answer to a call, key by key.
type renewCodes struct {
	codes []node.Renewal
	errs  []error // nil, or the error of each key (nil if none)
}

// sendBatch queues the renewals of holds (the renewer's under its mu) for collect.
func sendBatch(s *Set, r *renewer, holds []*Hold, now time.Time) *batch {
	n := len(holds)
	b := &batch{set: s, r: r, start: now, timeout: holds[0].lock.timeout(), leases: make([]renewal, n)}
	all := uint64(1)<<len(s.Nodes) - 1
	for i, h := range holds {
		b.leases[i] = renewal{h: h, ext: extension{unknown: all}}
		if r != nil { // a missing key is put back on the nodes that are not holders
			h.lock.mu.Lock()
			b.leases[i].restoreTo = all &^ h.holders
			h.lock.mu.Unlock()
		}
		b.timeout = min(b.timeout, h.lock.timeout())
	}
	// A call carries leases of one kind, and one lease or at most maxKeysPerCall keys.
	for i, nd := range s.Nodes {
		per := 1
		if nd.MultiKey() {
			per = maxKeysPerCall
		}
		for c := (chunk{node: i}); c.from < n; c.from = c.to {
			for keys := 0; c.to < n && (c.to == c.from || keys+len(holds[c.to].lock.renewKeys.names) <= per &&
				holds[c.to].lock.kind.Renew == holds[c.from].lock.kind.Renew); c.to++ {
				keys += len(holds[c.to].lock.renewKeys.names)
			}
			b.chunks = append(b.chunks, c)
		}
	}
	b.cmds = make([]node.Cmd, len(b.chunks))
	// An unsent call to a stalled node fails; only a node heard recently is excused delays.
	b.round = round.New[renewCodes](len(b.chunks), s.Clock, b.timeout, func(k int) bool {
		_, stalled := s.Nodes[b.chunks[k].node].Stalled(b.timeout, false)
		return stalled && b.cmds[k].Cancel()
	})
	b.round.ExcuseOnly(func(k int) bool {
		silent, _ := s.Nodes[b.chunks[k].node].Stalled(b.timeout, false)
		return silent <= s.Clock.Since(b.start)+b.timeout
	})
	for k, c := range b.chunks {
		if failStalled(b.set, b.round, k, c.node, b.timeout, false, "; this command was not sent") {
			continue
		}
		var keys []string
		args := make([]any, 0, 4*(c.to-c.from))
		for _, ls := range b.leases[c.from:c.to] {
			keys = append(keys, ls.h.lock.renewKeys.names...)
			args = ls.h.lock.appendRenewArgs(args, ls.h, ls.restoreTo>>c.node&1)
		}
		cmd := &b.cmds[k]
		cmd.Script, cmd.Keys, cmd.Args, cmd.To, cmd.Index = b.leases[c.from].h.lock.kind.Renew, keys, args, b, k
		b.set.Nodes[c.node].Send(cmd)
	}
	return b
}

func (b *batch) Sent(k int, at time.Time) { b.round.Sent(k, at) }

// Receive reads call k's answer; a key's error fails a call of one lease.
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
	b.round.Answer(k, vote(true, err), rc, err) // Yes: each lease's answer is read in collect
}

// collect reads answers until every lease is decided (or lost) or deadline
// fires (nil: never), then decides with what is known; ctx ending first leaves them undecided.
func (b *batch) collect(ctx context.Context, deadline <-chan time.Time) error {
	if err := b.round.Until(ctx, deadline, b.settled); err != nil && err != round.ErrDeadline {
		return err
	}
	b.settled() // reads the failures the deadline recorded
	for i := range b.leases {
		b.decide(i, true)
	}
	return nil
}

// settled reads the answers, decides the leases it can, and reports whether all are.
func (b *batch) settled() bool {
	replies := b.round.Replies()
	for _, rep := range replies[b.read:] {
		b.answer(rep)
	}
	b.read = len(replies)
	for i := range b.leases {
		if ls := &b.leases[i]; !ls.decided && (b.r == nil || ls.h.LostCause() == nil) {
			if b.decide(i, false); !ls.decided {
				return false
			}
		}
	}
	return true
}

// answer records a call's answer for each of its leases.
func (b *batch) answer(rep round.Reply[renewCodes]) {
	c := b.chunks[rep.Node]
	bit := uint64(1) << c.node
	for i := c.from; i < c.to; i++ {
		e := &b.leases[i].ext
		if rep.Vote == quorum.Failed || rep.Value.errs != nil && rep.Value.errs[i-c.from] != nil {
			e.failed |= bit
			continue
		}
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
}

// decide settles lease i once its outcome is known, or with what is known
// once over, all answered, (Extend's) its tally decided, or its loss deadline came.
func (b *batch) decide(i int, over bool) {
	ls := &b.leases[i]
	if ls.decided {
		return
	}
	s, h, e := b.set, ls.h, ls.ext
	l := h.lock
	l.mu.Lock()
	holders, suspect := h.holders, h.suspect
	l.mu.Unlock()
	// Won: a trusted majority extended; lost: fewer than a majority can hold it ("Leases").
	pending := e.unknown &^ e.failed
	possible := bits.OnesCount64(e.yes&^suspect | e.unknown&holders | pending&^suspect)
	won, lost := bits.OnesCount64(e.yes&^suspect) >= s.Need(), possible < s.Need()
	// A win waits for the nodes asked to restore, lest they stay suspect.
	final := over || pending == 0 || b.r == nil && e.tally(len(s.Nodes), suspect).Decided() || b.r != nil && h.overdue.Load()
	if !final && (!won && !lost || won && ls.restoreTo&pending != 0) {
		if won && ls.wonAt.IsZero() {
			ls.wonAt = s.Clock.Now()
		}
		return
	}
	ls.decided = true
	elapsed := s.Clock.Since(b.start)
	if won && !ls.wonAt.IsZero() {
		elapsed = ls.wonAt.Sub(b.start) // the validity dates from the majority's answers
	}
	switch v := timing.Validity(l.spec.TTL, elapsed, s.DriftFactor); {
	case b.r != nil && (h.ended.Load() || h.LostCause() != nil): // released or lost meanwhile
	case won && v > 0:
		h.extended(b.start, elapsed, b.start.Add(v+elapsed), e, ls.restoreTo)
		ls.ok = true
	case won:
		ls.gone, ls.late = fmt.Sprintf("a majority answered after %v, which leaves no validity of the %v TTL", elapsed, l.spec.TTL), true
	case lost:
		ls.gone = fmt.Sprintf("at most %d of %d nodes may still hold its token, fewer than a majority; it expired, passed to another owner, was forced open (ForceUnlock), or was lost with a node's data", possible, len(s.Nodes))
	default:
		h.forget(e, ls.restoreTo)
	}
	if b.r != nil {
		var failed *multierror.Error
		if !ls.ok && ls.gone == "" {
			failed = b.failures(i)
		}
		b.r.finished(h, ls.ok, ls.gone, ls.late, failed)
	}
}

// failures returns the node failures of lease i's calls, as nodeErrors does a round's.
func (b *batch) failures(i int) *multierror.Error {
	var m *multierror.Error
	for _, rep := range b.round.Replies() {
		c, err := b.chunks[rep.Node], rep.Err
		if i < c.from || i >= c.to {
			continue // a call for other leases
		}
		if err == nil && rep.Value.errs != nil {
			err = rep.Value.errs[i-c.from]
		}
		if err != nil && !notFailed(err) {
			m = multierror.Append(m, b.set.Errors.NodeFailure(b.set.Nodes[c.node].Addr(), err))
			m.ErrorFormat = oneLine
		}
	}
	return m
}
