package mutex

import "errors"

var (
	// ErrNotObtained is matched by every error of LockContext and
	// TryLockContext, with what says why: ErrContended, ErrNodesUnavailable,
	// ErrInvalid, ErrClosed, or ctx.Err() when ctx ended before any attempt
	// had an outcome (the nodes had not answered yet).
	ErrNotObtained = errors.New("mutex: lock not obtained")

	// ErrContended is matched, with ErrNotObtained, when the lock is busy:
	// another owner holds it, other callers are ahead in the queue, or the
	// votes split between callers, so that no majority said yes (the answer
	// to a duplicate request: HTTP 409); also when some nodes failed too,
	// once a majority answered (the *NodeError values name them; a leftover
	// of a process that died reads as another owner until its TTL). A
	// LockContext whose ctx ended
	// matches it, with ctx.Err(), if its last attempt with an outcome found
	// the lock busy.
	ErrContended = errors.New("mutex: lock held or contended by others")

	// ErrNodesUnavailable means failing nodes, not other owners, made a majority
	// impossible; the *NodeError values say which and why. From an acquisition it
	// means fewer than a majority of the nodes answered, or, with WithFencing,
	// that nodes which lost their data left too few fencing counters to vouch
	// for a number while the clock is behind a counter (no *NodeError then;
	// docs/design.md, "Fencing tokens"): check it before ErrNotObtained
	// (docs/design.md, "Contention or outage").
	ErrNodesUnavailable = errors.New("mutex: not enough nodes answered for a majority")

	// ErrNotHeld is returned by ExtendContext and UnlockContext on a Mutex that
	// does not hold the lock (never locked, released, expired, or now another's):
	// the work done under the lock may have overlapped another owner's.
	ErrNotHeld = errors.New("mutex: lock not held")

	// ErrAlreadyHeld is returned, with ErrNotObtained, by a Lock on a Mutex that
	// holds an acquisition UnlockContext has not released, valid or not. Nothing
	// is sent.
	ErrAlreadyHeld = errors.New("mutex: this Mutex already holds the lock")

	// ErrInvalid is matched by errors that report bad input (a name, a TTL, an
	// option); nothing is sent, but for a Semaphore's limit that differs from
	// the one its holders use, which the nodes refuse, writing nothing. From
	// acquisitions it comes with ErrNotObtained.
	ErrInvalid = errors.New("mutex: invalid argument")

	// ErrLost is matched by Mutex.LostCause, and by redlock.(*Redlock).Do's
	// error when the lock was lost while the work ran; it wraps the cause.
	ErrLost = errors.New("mutex: lock lost")

	// ErrNodeTimeout is the Err of a *NodeError for a node that did not answer
	// within the per-node timeout; the command may still run there.
	ErrNodeTimeout = errors.New("mutex: node did not answer within the per-node timeout")

	// ErrClosed is matched by every call after redlock.(*Redlock).Close
	// (nothing is sent; acquisitions add ErrNotObtained), and by the LostCause
	// of the acquisitions Close released.
	ErrClosed = errors.New("mutex: node set closed")

	// ErrQuarantined is the Err of a *NodeError for a node kept out of
	// majorities by redlock.WithRestartQuarantine.
	ErrQuarantined = errors.New("mutex: node in restart quarantine")
)

// NodeError is one node's failure in a lock operation: a connection, protocol
// or Redis error, a malformed reply, ErrNodeTimeout or ErrQuarantined. It is
// never used for a node that answered that someone else holds the key. An
// operation's error holds one per failed node in a *multierror.Error
// (github.com/hashicorp/go-multierror): errors.As finds the first
// *NodeError, and the *multierror.Error's Errors lists them all.
type NodeError struct {
	Node string // the node's address
	Err  error
}

func (e *NodeError) Error() string { return "node " + e.Node + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }
