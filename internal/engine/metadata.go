package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// MetadataKey names the metadata record of a Meta lock's key: beside the
// key, in its hash slot on sharded nodes. It holds the token, a newline,
// then the metadata, with the key's TTL.
func (s *Set) MetadataKey(key string) string {
	return s.Beside(key, auxInfix+auxMetadata)
}

// ParseMetadata splits a metadata record's value into the token whose it
// is and the metadata; false when it is not a record.
func ParseMetadata(record string) (token, metadata string, ok bool) {
	token, metadata, ok = strings.Cut(record, "\n")
	return token, metadata, ok && token != ""
}

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
	keys := newKeyset(l.key, s.MetadataKey(l.key))
	args := []any{h.token, metadata, l.channelBoxed}
	f := send(s, l.timeout(), skipStalled, nil, node.MetaSetScript, keys, args,
		func(_ int, r node.Result) (quorum.Vote, struct{}, error) {
			if r.Err != nil {
				return quorum.Failed, struct{}{}, r.Err
			}
			if n, ok := r.Reply.(int64); ok && n == 1 {
				return quorum.Yes, struct{}{}, nil
			} else if ok && (n == 0 || n == -1) {
				return quorum.No, struct{}{}, nil
			}
			return quorum.Failed, struct{}{}, fmt.Errorf("meta-set: unexpected reply %v", r.Reply)
		})
	derr := f.round.Decide(ctx, nil)
	t := f.round.Tally()
	nodes := nodeErrors(s, f.round)
	switch {
	case t.Won():
		return nil
	case t.Lost() && t.N-t.No < t.Need:
		return &OpError{
			msg:   fmt.Sprintf("mutex: set metadata of %q: lock not held: fewer than a majority of nodes hold this Mutex's token (%v)", l.spec.Name, t),
			is:    []error{s.Errors.NotHeld},
			nodes: nodes,
		}
	case !t.Decided() && derr != nil:
		return WithCtx(&OpError{msg: fmt.Sprintf("mutex: set metadata of %q interrupted before a majority answered (%v)", l.spec.Name, t), nodes: nodes}, derr)
	}
	return &OpError{
		msg:   fmt.Sprintf("mutex: set metadata of %q: too few nodes answered; the metadata may be the new one on some nodes and the old one on others (%v)", l.spec.Name, t),
		is:    []error{s.Errors.NodesUnavailable},
		nodes: nodes,
	}
}
