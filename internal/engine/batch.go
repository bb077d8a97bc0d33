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

// batch is one round of automatic renewals (docs/design.md, "Leases"): the
// renew script sent to every node for many leases at once, each lease
// decided from its nodes' answers as they arrive.
type batch struct {
	r         *renewer
	start     time.Time
	timeout   time.Duration
	holds     []*Hold
	ext       []extension
	restoreTo []uint64 // per lease: the nodes asked to put a missing key back
	keyAt     []int    // per lease: where its keys start in a call's keys
	argAt     []int    // per lease: where its arguments start
	heard     []int    // nodes that answered, per lease
	decided   []bool   // per lease
	over      bool     // collect has read all it will: leases are decided with what is known
	chunks    []chunk
	cmds      []node.Cmd
	round     *round.Round[node.Result] // one voter per chunk
}

// chunk is one script call: node's keys of holds[from:to].
type chunk struct{ node, from, to int }

func newBatch(r *renewer, holds []*Hold, now time.Time) *batch {
	s := r.set
	n := len(holds)
	b := &batch{r: r, start: now, holds: holds, timeout: holds[0].lock.timeout(),
		ext: make([]extension, n), restoreTo: make([]uint64, n), heard: make([]int, n), decided: make([]bool, n),
		keyAt: make([]int, n+1), argAt: make([]int, n+1)}
	all := uint64(1)<<len(s.Nodes) - 1
	for i, h := range holds {
		b.ext[i].unknown = all
		b.timeout = min(b.timeout, h.lock.timeout())
		b.keyAt[i+1] = b.keyAt[i] + len(h.lock.renewKeys.names)
		b.argAt[i+1] = b.argAt[i] + 3 // as appendRenewArgs
		if len(h.lock.keys) > 1 {
			b.argAt[i+1]++
		}
	}
	// A call carries the leases of one kind: holds come grouped by kind
	// (see renewer.run), and a chunk ends where the kind changes.
	for i, n := range s.Nodes {
		per := 1
		if n.MultiKey() {
			per = maxKeysPerCall
		}
		for from := 0; from < len(holds); {
			to := from + 1
			for to < len(holds) && b.keyAt[to+1]-b.keyAt[from] <= per && holds[to].lock.kind.Renew == holds[from].lock.kind.Renew {
				to++
			}
			b.chunks = append(b.chunks, chunk{node: i, from: from, to: to})
			from = to
		}
	}
	b.cmds = make([]node.Cmd, len(b.chunks))
	// A call still waiting to be sent waits on, unless its node has
	// stalled: it is then withdrawn, and fails.
	b.round = round.New[node.Result](len(b.chunks), s.Clock, b.timeout)
	b.round.WatchUnsent(func(k int) bool {
		_, stalled := s.Nodes[b.chunks[k].node].Stalled(b.timeout)
		return stalled && b.cmds[k].Cancel()
	})
	return b
}

func (b *batch) Sent(k int, at time.Time) { b.round.Sent(k, at) }
func (b *batch) Receive(k int, r node.Result) {
	b.r.set.answered(b.chunks[k].node, r.Err, r.Sent, b.timeout)
	vote := quorum.Yes // each lease's answer is read in collect
	if r.Err != nil {
		vote = quorum.Failed
	}
	b.round.Answer(k, vote, r, r.Err)
}

// send queues the calls on the nodes and starts the goroutine that reads
// their answers. The renewer's mu is held.
func (b *batch) send() {
	// A missing key is put back only on nodes that are not holders: on a
	// holder, a missing key is a loss to count, never to hide (see
	// Hold.judge).
	nodes := b.r.set.Nodes
	all := uint64(1)<<len(nodes) - 1
	keys := make([]string, 0, b.keyAt[len(b.holds)])
	for i, h := range b.holds {
		keys = append(keys, h.lock.renewKeys.names...)
		b.restoreTo[i] = all &^ h.holdersNow()
	}
	args := make([][]any, len(nodes))
	for n := range nodes {
		args[n] = make([]any, 0, b.argAt[len(b.holds)])
		for i, h := range b.holds {
			restore := "0"
			if b.restoreTo[i]&(1<<n) != 0 {
				restore = "1"
			}
			args[n] = h.lock.appendRenewArgs(args[n], h.token, restore)
		}
	}
	for k, c := range b.chunks {
		if waited, stalled := nodes[c.node].Stalled(b.timeout); stalled {
			err := &stalledError{waited: waited}
			b.r.set.answered(c.node, err, time.Time{}, 0)
			b.round.Answer(k, quorum.Failed, node.Result{}, err)
			continue
		}
		cmd := &b.cmds[k]
		cmd.Script, cmd.Keys, cmd.Args = b.holds[c.from].lock.kind.Renew, keys[b.keyAt[c.from]:b.keyAt[c.to]], args[c.node][b.argAt[c.from]:b.argAt[c.to]]
		cmd.To, cmd.Index = b, k
		nodes[c.node].Send(cmd)
	}
	go b.collect()
}

// collect reads the answers until every lease is decided, lost or
// released.
func (b *batch) collect() {
	defer b.r.batchDone()
	read := 0
	_ = b.round.Until(context.Background(), nil, func() bool {
		replies := b.round.Replies()
		for _, rep := range replies[read:] {
			res := rep.Value
			res.Err = rep.Err
			b.answer(rep.Node, res)
		}
		read = len(replies)
		return read == len(b.chunks) || b.settled()
	})
	b.over = true
	for i := range b.holds {
		b.decide(i)
	}
}

// settled reports whether no lease waits for the batch any more.
func (b *batch) settled() bool {
	for i, h := range b.holds {
		if !b.decided[i] && h.LostCause() == nil {
			return false
		}
	}
	return true
}

// answer records chunk k's result for each of its leases.
func (b *batch) answer(k int, res node.Result) {
	c := &b.chunks[k]
	bit := uint64(1) << c.node
	var codes []node.Renewal
	var errs []error
	err := res.Err
	if err == nil {
		codes, errs, err = node.ParseRenew(res.Reply, c.to-c.from)
	}
	for i := c.from; i < c.to; i++ {
		b.heard[i]++
		if err == nil && (errs == nil || errs[i-c.from] == nil) {
			e := &b.ext[i]
			e.unknown &^= bit
			switch codes[i-c.from] {
			case node.Extended:
				e.yes |= bit
			case node.Restored:
				e.restored |= bit
			default:
				e.gone |= bit
			}
		} else {
			b.ext[i].failed |= bit
		}
		b.decide(i)
	}
}

// decide settles lease i once its outcome is known, or with what is known
// once every node answered or the batch is over.
func (b *batch) decide(i int) {
	if b.decided[i] {
		return
	}
	h, e := b.holds[i], b.ext[i]
	l := h.lock
	s := l.set
	won, lost := h.judge(e, s.Need())
	// A win waits for the nodes asked to put the key back: decided without
	// their answers, they would stay suspect.
	pendingRestore := b.restoreTo[i] & e.unknown &^ e.failed
	final := b.over || b.heard[i] == len(s.Nodes)
	if !final && (!won && !lost || won && pendingRestore != 0) {
		return
	}
	b.decided[i] = true
	now := s.Clock.Now()
	b.r.mu.Lock()
	ended := h.ended
	b.r.mu.Unlock()
	switch {
	case ended || h.LostCause() != nil:
	case won:
		if v := timing.Validity(l.spec.TTL, now.Sub(b.start), s.DriftFactor); v > 0 {
			h.extended(b.start, b.start.Add(v), e, b.restoreTo[i])
			b.r.mu.Lock()
			h.renewed++
			h.retryAt = time.Time{}
			b.r.mu.Unlock()
			break
		}
		h.foundLost(l.lostErr(s.Errors.NotHeld, fmt.Sprintf("a renewal answered after %v, which leaves no validity", now.Sub(b.start))))
	case lost:
		h.foundLost(l.lostErr(s.Errors.NotHeld, fmt.Sprintf("only %d nodes can still hold its token, fewer than a majority", h.possible(e))))
	default:
		h.forget(e, b.restoreTo[i])
		deadline := h.Until().Add(-l.lossMargin())
		b.r.mu.Lock()
		h.retryAt = now.Add(max(deadline.Sub(now)/4, l.spec.TTL/100))
		b.r.mu.Unlock()
	}
	b.r.finished(h)
}
