package mutex

import (
	"errors"
)

var (
	// ErrNotObtained is matched (errors.Is) by every error of LockContext and
	// TryLockContext: the call did not obtain the lock, for whatever reason.
	// On its own it means other owners hold the key on enough nodes, or
	// other callers are ahead in its queue; see ErrNodesUnavailable and
	// ErrInvalid for the other reasons, and ctx.Err(), also matched when ctx
	// ended the call.
	ErrNotObtained = errors.New("mutex: lock not obtained")

	// ErrNodesUnavailable is matched, in addition to ErrNotObtained (or to the
	// error of Extend or Unlock), when failing nodes (errors, timeouts), not
	// other owners, made a majority impossible. The *NodeError values say which
	// nodes and why. From LockContext and TryLockContext it means fewer than a
	// majority of the nodes answered: if a majority answered and one of them
	// said another owner holds the key (a vote split between owners with some
	// nodes down), the error is ErrNotObtained alone, still with a *NodeError
	// per failed node. Check it before ErrNotObtained
	// (docs/design.md#contention-or-outage-the-rule-for-acquisitions).
	ErrNodesUnavailable = errors.New("mutex: not enough nodes answered for a majority")

	// ErrNotHeld is returned by ExtendContext and UnlockContext when this Mutex
	// does not hold the lock: never locked, already released, expired, or now
	// owned by someone else. The work done under the lock may have overlapped
	// another owner's.
	ErrNotHeld = errors.New("mutex: lock not held")

	// ErrAlreadyHeld is returned (together with ErrNotObtained) by LockContext
	// and TryLockContext on a Mutex that holds an acquisition UnlockContext has
	// not released, whether or not its validity has ended. Nothing is sent to
	// the nodes.
	ErrAlreadyHeld = errors.New("mutex: this Mutex already holds the lock")

	// ErrInvalid is matched by errors that report bad input: an empty or
	// too long name, a TTL that leaves no validity, a negative number of
	// tries, bad retry delays. Nothing is sent to the nodes. From LockContext
	// and TryLockContext it comes together with ErrNotObtained.
	ErrInvalid = errors.New("mutex: invalid argument")

	// ErrLost is matched by Mutex.LostCause and by the error of
	// redlock.(*Redlock).Do when the lock was lost while the work ran: a
	// majority no longer held the token, or no extension reached a majority
	// before the validity ended.
	ErrLost = errors.New("mutex: lock lost")

	// ErrNodeTimeout is the Err of a *NodeError for a node that did not answer
	// within the per-node timeout. The command may still run on that node; the
	// library orders its release after it.
	ErrNodeTimeout = errors.New("mutex: node did not answer within the per-node timeout")

	// ErrClosed is matched by the errors of every call on a Mutex of a node
	// set after redlock.(*Redlock).Close (nothing is sent; from acquisitions
	// together with ErrNotObtained, including LockContext calls that were
	// waiting), and by the LostCause of the acquisitions Close released.
	ErrClosed = errors.New("mutex: node set closed")

	// ErrQuarantined is the Err of a *NodeError for a node kept out of
	// majorities by redlock.WithRestartQuarantine: it restarted (lost its
	// data) or started less than the quarantine ago.
	ErrQuarantined = errors.New("mutex: node in restart quarantine")
)

// NodeError is one node's failure during a lock operation: a connection or
// protocol error, a Redis error reply (READONLY, NOAUTH, WRONGTYPE, ...), a
// malformed script reply, or ErrNodeTimeout. It is never used for a node that
// answered that someone else holds the key.
type NodeError struct {
	Node string // the node's address
	Err  error
}

func (e *NodeError) Error() string { return "node " + e.Node + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }
