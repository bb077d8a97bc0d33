package redlock

import (
	"github.com/quorumlock/quorumlock/internal/construct"
	"github.com/quorumlock/quorumlock/internal/engine"
)

// init hands package idempotency the node set of a Redlock, without
// exporting it (see construct.NodeSet).
func init() {
	construct.NodeSet = func(r *Redlock) *engine.Set {
		if r == nil {
			return nil
		}
		return r.set
	}
}
