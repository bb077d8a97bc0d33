package engine

import (
	"context"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// SetMetadata replaces the metadata of h, a Meta lock's acquisition, on
// every node where its key still holds its token, keeping the key's TTL
// (metaset.lua), and for the renewals that put the key back; it tells the
// key's observers. The caller holds the op slot. It waits at most the
// per-node timeout and never past ctx.
//
// Errors: NotHeld when fewer than a majority can still hold the token (or
// h was found lost); NodesUnavailable, or ctx's error, when too few nodes
// answered to tell. Nodes that did not write keep the metadata they had.
func (l *Contender) SetMetadata(ctx context.Context, h *Hold, metadata string) error {
	s := l.set
	if cause := h.LostCause(); cause != nil {
		return cause
	}
	r := s.renewals()
	r.mu.Lock() // a renewal queued before, with the old record, runs before this call on each node
	h.record = h.token + "\n" + metadata
	r.mu.Unlock()
	keys, args := newKeyset(l.key, s.Keys.Metadata(l.key)), []any{h.token, metadata, l.channelBoxed}
	f := send(s, l.timeout(), skipStalled, nil, node.MetaSetScript, keys, args,
		func(_ int, r node.Result) (quorum.Vote, struct{}, error) {
			ok, err := node.ParseFlag("meta-set", r.Reply)
			return vote(ok, err), struct{}{}, err
		})
	derr := f.round.Decide(ctx, nil)
	if t := f.round.Tally(); !t.Won() {
		return l.failed("set metadata of", t, derr, nodeErrors(s, f.round), "fewer than a majority of nodes hold this Mutex's token",
			"; the metadata may be the new one on some nodes and the old one on others")
	}
	return nil
}
