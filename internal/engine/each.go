package engine

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// Reply is one node's answer to a script sent by Each.
type Reply struct {
	Value    any
	NoScript bool  // the node had lost its script cache (node.Result.NoScript)
	Err      error // the node's failure (see Errors.Node); nil when it answered
}

// Each sends script, with keys and args, to every node in parallel (a node
// that has stopped answering for longer than timeout is skipped and fails)
// and waits for each answer at most timeout after its command left, or
// until ctx ends: replies[i] is node i's.
func (s *Set) Each(ctx context.Context, timeout time.Duration, script *node.Script, keys []string, args []any) []Reply {
	f := send(s, timeout, skipStalled, nil, quorum.No, script, newKeyset(keys...), args,
		func(_ int, r node.Result) (quorum.Vote, node.Result, error) {
			if r.Err != nil {
				return quorum.Failed, r, r.Err
			}
			return quorum.Yes, r, nil
		})
	values, errs := collect(ctx, s, f)
	replies := make([]Reply, len(s.Nodes))
	for i := range replies {
		replies[i] = Reply{Value: values[i].Reply, NoScript: values[i].NoScript, Err: errs[i]}
	}
	return replies
}
