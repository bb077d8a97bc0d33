package engine

import (
	"context"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// SetMetadata replaces h's metadata where its key holds its token, keeping
// the TTL, and tells the key's observers; the caller holds the op slot.
// Errors: NotHeld, or NodesUnavailable or ctx's when too few answered
// (the others keep the old metadata).
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
