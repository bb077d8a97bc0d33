package mutex

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Leader reads, on every node in parallel, who leads: the value and fencing
// token the leader shows on a majority (of its proclamations found there,
// the latest), from when its Campaign showed its token on a majority, just
// before returning. It returns as soon as the answers in settle it, not
// waiting for a slow minority. Errors: ErrNoLeader when no candidate can
// hold a majority; ErrNodesUnavailable (with *NodeErrors) or ctx's error
// when too few nodes answered to tell; ErrInvalid or ErrClosed, nothing
// sent. It waits for a node at most the per-node timeout, and not at all
// for one that has not answered for longer (docs/design.md, "Election").
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, _, err := e.read(ctx)
	return l, err
}

// read is Leader, also returning the proclamation's number.
func (e *Election) read(ctx context.Context) (Leader, uint64, error) {
	if err := e.usable(ctx, true); err != nil {
		return Leader{}, 0, err
	}
	s := e.set
	if err := s.ErrIfClosed("mutex: election %q: the node set was closed; nothing sent", e.name); err != nil {
		return Leader{}, 0, err
	}
	key, timeout := s.Keys.Prefix+e.name, s.Timeout(timing.DefaultTTL)
	peek := func(ctx context.Context, n *node.Node, key string) (node.Peek, error) {
		return node.Parse(n.Read(ctx, timeout, node.PeekScript, []string{key}, nil), node.ParsePeek)
	}
	// shows reads what node n shows: a leadership when its key and record
	// name the same token (both read at once).
	shows := func(ctx context.Context, n *node.Node) (shown, error) {
		var k node.Peek
		var kerr error
		done := make(chan struct{})
		go func() { k, kerr = peek(ctx, n, key); close(done) }()
		r, rerr := peek(ctx, n, s.Keys.Metadata(key))
		if <-done; kerr != nil || rerr != nil {
			return shown{}, cmp.Or(kerr, rerr)
		}
		token, md, ok := node.ParseMetadata(r.Value)
		if k.Type != "string" || r.Type != "string" || !ok || token != k.Value {
			return shown{}, nil
		}
		if fence, seq, value, ok := decodeLeader(md); ok {
			return shown{token, Leader{Value: value, FencingToken: fence}, seq}, nil
		}
		return shown{}, nil
	}
	var l Leader
	var seq uint64
	var verdict error
	// decide judges the answers in: a token on a majority leads (its latest
	// proclamation there); no token can reach one: nobody leads.
	decide := func(shows []shown, errs []error, done []bool) bool {
		byToken := map[string]*shown{}
		count := map[string]int{}
		failed, pending := 0, 0
		for i, sh := range shows {
			switch {
			case !done[i]:
				pending++
			case errs[i] != nil:
				failed++
			case sh.token != "":
				if best := byToken[sh.token]; best == nil || sh.seq >= best.seq {
					byToken[sh.token] = &shows[i]
				}
				count[sh.token]++
			}
		}
		most := 0
		for token, sh := range byToken {
			if count[token] >= s.Need() && sh.seq > 0 {
				l, seq, verdict = sh.leader, sh.seq, nil
				return true
			}
			// A token at proclamation 0 on every node that answered leads
			// only if one yet to answer, or failed, shows a proclamation.
			if sh.seq > 0 || failed+pending > 0 {
				most = max(most, count[token])
			}
		}
		if most+failed+pending < s.Need() {
			verdict = engine.NewError(fmt.Sprintf("mutex: election %q: no candidate leads on a majority of nodes", e.name), ErrNoLeader)
			return true
		}
		msg := fmt.Sprintf("%d of %d nodes failed: who leads is unknown", failed, len(s.Nodes))
		l, seq, verdict = Leader{}, 0, s.UnavailableError(ctx, fmt.Sprintf("mutex: election %q", e.name), msg, errs)
		return false
	}
	node.Each(ctx, s.Nodes, nil, shows, s.Errors.NodeFailure, decide)
	return l, seq, verdict
}

// shown is the leadership a node shows: its token ("" if none), leader and
// proclamation.
type shown struct {
	token  string
	leader Leader
	seq    uint64
}

// Observe returns a channel that delivers the current leader, then every
// change: a new leader, a Proclaim, and a zero Leader while nobody leads.
// It never delivers a leader older than one it delivered (by fencing token,
// then proclamation); a reader that lags is handed one stale leader, then
// the latest, not every change it missed. A change is
// seen within a round trip of its announcement on the key's channel, and
// at the latest within the poll, min(TTL/4, 1s) (docs/design.md,
// "Election"). The channel closes when ctx ends or the node set is
// closed; on a bad Election it closes at once, nothing delivered.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	if e.usable(ctx, true) != nil {
		close(ch)
		return ch
	}
	var watch *notify.Waiter
	if e.set.Notify {
		watch = e.set.Hub().Watch(notify.Channel(e.set.Keys.Prefix + e.name))
	}
	go e.observe(ctx, ch, watch)
	return ch
}

func (e *Election) observe(ctx context.Context, ch chan<- Leader, watch *notify.Waiter) {
	defer close(ch)
	var wake <-chan struct{}
	if watch != nil {
		defer watch.Stop()
		wake = watch.Wake()
	}
	poll, closing := e.poll, e.set.Closing()
	var last Leader
	var lastSeq uint64
	delivered := false
	for {
		l, seq, err := e.read(ctx)
		if errors.Is(err, ErrClosed) {
			return
		}
		var out *Leader
		switch {
		case err == nil && (!delivered || l.FencingToken > last.FencingToken || (l.FencingToken == last.FencingToken && seq > lastSeq)):
			out, last, lastSeq = &l, l, seq
		case err != nil && errors.Is(err, ErrNoLeader) && (!delivered || last != Leader{}):
			out, last = &Leader{}, Leader{}
		}
		if out != nil {
			select {
			case ch <- *out:
				delivered = true
			case <-ctx.Done():
				return
			case <-closing:
				return
			}
		}
		t := e.set.Clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-closing:
			t.Stop()
			return
		case <-wake:
		case <-t.C():
		}
		t.Stop()
	}
}
