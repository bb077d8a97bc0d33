package mutex

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/notify"
)

// Leader reads, on every node in parallel, who leads: the value and fencing
// token the leader shows on a majority (of its proclamations found there,
// the latest), from when its Campaign showed its token on a majority, just
// before returning. Errors: ErrNoLeader
// when no candidate can hold a majority; ErrNodesUnavailable (with
// *NodeErrors) or ctx's error when too few nodes answered to tell;
// ErrInvalid or ErrClosed, nothing sent. Each node waits at most the
// per-node timeout.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, _, err := e.read(ctx)
	return l, err
}

// read is Leader, also returning the proclamation's number.
func (e *Election) read(ctx context.Context) (Leader, uint64, error) {
	if err := e.usable(ctx); err != nil {
		return Leader{}, 0, err
	}
	s := e.set
	if err := s.ErrIfClosed("mutex: election %q: the node set was closed; nothing sent", e.name); err != nil {
		return Leader{}, 0, err
	}
	key := s.KeyPrefix + e.name
	peek := func(key string) ([]node.Peek, []error) {
		return engine.Each(ctx, s, nil, 0, node.PeekScript, []string{key}, nil, node.PeekOf)
	}
	var keys []node.Peek
	var keyErrs []error
	done := make(chan struct{})
	go func() { keys, keyErrs = peek(key); close(done) }()
	records, recordErrs := peek(s.MetadataKey(key))
	<-done
	type shown struct {
		nodes int
		best  Leader
		seq   uint64
	}
	byToken := map[string]*shown{}
	failed, errs := 0, make([]error, len(s.Nodes))
	for i := range s.Nodes {
		k, r := keys[i], records[i]
		if errs[i] = firstErr(keyErrs[i], recordErrs[i]); errs[i] != nil {
			failed++
			continue
		}
		token, md, ok := node.ParseMetadata(r.Value)
		if k.Type != "string" || r.Type != "string" || !ok || token != k.Value {
			continue
		}
		fence, seq, value, ok := decodeLeader(md)
		if !ok {
			continue
		}
		sh := byToken[token]
		if sh == nil {
			sh = &shown{}
			byToken[token] = sh
		}
		sh.nodes++
		if seq >= sh.seq {
			sh.best, sh.seq = Leader{Value: value, FencingToken: fence}, seq
		}
	}
	most := 0
	for _, sh := range byToken {
		if sh.nodes >= s.Need() && sh.seq > 0 {
			return sh.best, sh.seq, nil
		}
		most = max(most, sh.nodes)
	}
	if most+failed >= s.Need() {
		msg := fmt.Sprintf("mutex: election %q: %d of %d nodes failed: who leads is unknown", e.name, failed, len(s.Nodes))
		return Leader{}, 0, s.UnavailableError(ctx, msg, errs)
	}
	return Leader{}, 0, engine.NewError(fmt.Sprintf("mutex: election %q: no candidate leads on a majority of nodes", e.name), ErrNoLeader)
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
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
	if e.usable(ctx) != nil {
		close(ch)
		return ch
	}
	var watch *notify.Waiter
	if e.set.Notify {
		watch = e.set.Hub().Watch(notify.Channel(e.set.KeyPrefix + e.name))
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
	poll := e.poll
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
			}
		}
		t := e.set.Clock.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wake:
		case <-t.C():
		}
		t.Stop()
	}
}
