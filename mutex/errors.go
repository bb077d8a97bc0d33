package mutex

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// ErrQuarantined is the Err of a *NodeError for a node kept out of majorities
// by redlock.WithRestartQuarantine: it restarted (lost its data) or started
// less than the quarantine ago. It is the same value as the internal node
// package's.
var ErrQuarantined = node.ErrQuarantined

// quarantineError says when a quarantined node will count again.
type quarantineError struct{ until time.Time }

func (e *quarantineError) Error() string {
	return fmt.Sprintf("%v: it started or lost data recently, and counts again from %s", ErrQuarantined, e.until.Format(time.RFC3339))
}

func (e *quarantineError) Unwrap() error { return ErrQuarantined }

var (
	// ErrNotObtained is matched (errors.Is) by every error of LockContext and
	// TryLockContext: the call did not obtain the lock, for whatever reason.
	// On its own it means other owners hold the key on enough nodes; see
	// ErrNodesUnavailable and ErrInvalid for the other reasons, and
	// ctx.Err(), also matched when ctx ended the call: then the cause is the
	// last attempt that reached an outcome, if any (possibly none, when ctx
	// ended before the nodes answered).
	ErrNotObtained = errors.New("mutex: lock not obtained")

	// ErrNodesUnavailable is matched, in addition to ErrNotObtained (or to the
	// error of Extend or Unlock), when failing nodes (errors, timeouts), not
	// other owners, made a majority impossible. The *NodeError values say which
	// nodes and why.
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

// opError is what a lock operation returns when it fails: a readable summary,
// the sentinel values it matches, and every node's failure. Callers see it only
// through errors.Is and errors.As.
type opError struct {
	msg   string
	is    []error
	nodes *multierror.Error // nil when no node failed
}

func (e *opError) Error() string {
	if e.nodes == nil {
		return e.msg
	}
	return e.msg + ": " + e.nodes.Error()
}

func (e *opError) Is(target error) bool { return slices.Contains(e.is, target) }

// Unwrap returns the *multierror.Error holding every *NodeError, or nil.
func (e *opError) Unwrap() error {
	if e.nodes == nil {
		return nil
	}
	return e.nodes
}

// invalid reports bad input; from acquisition calls it also matches
// ErrNotObtained.
func invalid(format string, args ...any) *opError {
	return &opError{msg: fmt.Sprintf(format, args...), is: []error{ErrInvalid}}
}

// nodeErrors collects the failed replies of a round as *NodeError values.
func nodeErrors[T any](r *quorum.Round[T], addr func(int) string) *multierror.Error {
	var m *multierror.Error
	for _, rep := range r.Replies() {
		if rep.Vote != quorum.Failed {
			continue
		}
		err := rep.Err
		if errors.Is(err, quorum.ErrDeadline) {
			err = ErrNodeTimeout
		}
		m = multierror.Append(m, &NodeError{Node: addr(rep.Node), Err: err})
	}
	if m != nil {
		m.ErrorFormat = oneLine
	}
	return m
}

// oneLine formats node errors on one line, for logs.
func oneLine(errs []error) string {
	parts := make([]string, len(errs))
	for i, err := range errs {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// withCtx joins the last attempt's error with the context's, so that
// errors.Is matches both ctx.Err() and the attempt's cause.
func withCtx(last, ctxErr error) error {
	return fmt.Errorf("%w: %w", last, ctxErr)
}
