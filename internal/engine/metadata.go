package engine

import (
	"context"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// MetadataKey names the metadata record of a Meta lock's key: beside the
// key, in its hash slot on sharded nodes. It holds the token, a newline,
// then the metadata, with the key's TTL.
func (s *Set) MetadataKey(key string) string { return s.Beside(key, auxInfix+auxMetadata) }

// SetMetadata replaces the metadata of h, a Meta lock's acquisition, on
// every node where its key still holds its token, keeping the key's TTL
// (metaset.lua), and tells the key's observers. The caller holds the op
// slot. It waits at most the per-node timeout and never past ctx.
//
// Errors: NotHeld when fewer than a majority can still hold the token (or
// h was found lost); NodesUnavailable, or ctx's error, when too few nodes
// answered to tell. Nodes that did not write keep the metadata they had.
func (l *Contender) SetMetadata(ctx context.Context, h *Hold, metadata string) error {
	s := l.set
	if cause := h.LostCause(); cause != nil {
		return cause
	}
	keys, args := newKeyset(l.key, s.MetadataKey(l.key)), []any{h.token, metadata, l.channelBoxed}
	f := send(s, l.timeout(), skipStalled, nil, node.MetaSetScript, keys, args,
		func(_ int, r node.Result) (quorum.Vote, struct{}, error) {
			n, ok := r.Reply.(int64)
			switch {
			case r.Err != nil:
				return quorum.Failed, struct{}{}, r.Err
			case ok && n == 1:
				return quorum.Yes, struct{}{}, nil
			case ok && (n == 0 || n == -1):
				return quorum.No, struct{}{}, nil
			}
			return quorum.Failed, struct{}{}, fmt.Errorf("meta-set: unexpected reply %v", r.Reply)
		})
	derr := f.round.Decide(ctx, nil)
	if t := f.round.Tally(); !t.Won() {
		return l.failed("set metadata of", t, derr, nodeErrors(s, f.round), "fewer than a majority of nodes hold this Mutex's token",
			"; the metadata may be the new one on some nodes and the old one on others")
	}
	return nil
}
