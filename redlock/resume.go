package redlock

import (
	"context"

	"github.com/quorumlock/quorumlock/mutex"
)

// ResumeMutex returns a Mutex holding the lock of handle (from
// [mutex.Mutex.Handle], in any process): same token and fencing token. It
// reads the key on every node and returns once a majority shows the token:
// one round, at most the per-node timeout, never past ctx; nothing written.
// opts configure the Mutex as NewMutex's do (WithAutoExtend among them); the
// TTL and metadata are the handle's (WithTTL or WithMetadata with others is ErrInvalid). Until is derived
// from the TTL the majority has left, never later than the original's.
//
// Errors: mutex.ErrNotHeld when fewer than a majority still hold the token,
// or the validity left is within a tenth of the TTL (a lease is declared
// lost there);
// mutex.ErrNodesUnavailable when too few nodes answered; ctx's error;
// mutex.ErrInvalid, nothing sent, for a malformed handle or one of another
// key prefix or node set (the same addresses, in any order, are the same).
func (r *Redlock) ResumeMutex(ctx context.Context, handle string, opts ...mutex.Option) (*mutex.Mutex, error) {
	return newResumed(ctx, r.nodeSet(), handle, opts...)
}
