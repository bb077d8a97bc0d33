package engine

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/quorum"
)

// Hold is one acquisition: token, validity, holders and lease. Fields under
// "lock.mu" are guarded by its Contender's mu, under "renewer" by the renewer's.
type Hold struct {
	lock    *Contender
	token   string
	id      string // the waiter ids its release removes, space-separated (passes add)
	fence   uint64
	start   time.Time // when the winning attempt started, or it was passed
	granted time.Time // when it was obtained from the nodes, through passes
	passes  int       // consecutive passes within the process that led to it
	mark    string    // its tombstones' mark when it shares its token (Shared, Resume); else ""

	// lock.mu
	held         bool          // not yet released by Release
	until        time.Time     // end of the validity; zero once found lost
	renewedAt    time.Time     // start of the round that set until
	lag          time.Duration // how long that round took to be decided (Lag)
	holders      uint64        // bit i: node i may hold the token
	absent       uint64        // bit i: node i never had the token (it refused it, or the acquisition never reached it)
	suspect      uint64        // bit i: node i's answers do not count ("Renewals put lost keys back")
	releaseVotes []quorum.Vote // each node's answer to an unconfirmed Release; kept by a retry
	lostUntil    time.Time     // until, before it was found lost

	lost, done         chan struct{} // closed when the acquisition is lost; when it ends, lost or released
	lostOnce, doneOnce sync.Once
	cause              error // why it was lost, set before lost is closed

	// renewer
	renew   bool              // renewed automatically (else only watched)
	ended   atomic.Bool       // released or being released: never renew again
	renewed int               // automatic renewals so far
	retryAt time.Time         // after a renewal that too few nodes answered
	due     time.Time         // when the renewer acts on it next
	slack   time.Duration     // how much earlier it may go with a batch
	index   int               // in the renewer's heap; -1 if not in it
	batch   *batch            // the renewal in flight, if any
	failed  *multierror.Error // the node failures of its latest renewal that too few answered
	overdue atomic.Bool       // its loss deadline came while batch was in flight
	sweep   bool              // lost: on the schedule only to send its release when its validity ends
	record  any               // put back beside a key restored: the limit, or token and metadata; set with the op slot too
}

func newHold(l *Contender, token, id string, start time.Time, lag time.Duration, until time.Time, holders uint64, fence uint64) *Hold {
	h := &Hold{
		lock: l, token: token, id: id, fence: fence, start: start,
		held: true, until: until, renewedAt: start, lag: lag, holders: holders,
		lost: make(chan struct{}), done: make(chan struct{}), index: -1, record: l.limitArg,
	}
	if l.kind == MetaKind {
		h.record = token + "\n" + l.spec.Metadata
	}
	return h
}

// Token returns the acquisition's token.
func (h *Hold) Token() string { return h.token }

// Fence returns the acquisition's fencing number, 0 without fencing.
func (h *Hold) Fence() uint64 { return h.fence }

// Until returns the end of the validity: zero once found lost or released.
func (h *Hold) Until() time.Time {
	h.lock.mu.Lock()
	defer h.lock.mu.Unlock()
	return h.until
}

// Lost returns the channel closed when the acquisition is lost; a call starts watching it.
func (h *Hold) Lost() <-chan struct{} {
	h.lock.set.renewals().watch(h, false)
	return h.lost
}

// LostCause returns why the acquisition was lost, or nil.
func (h *Hold) LostCause() error {
	select {
	case <-h.lost:
		return h.cause
	default:
		return nil
	}
}

// markLost records that the acquisition was lost, once.
func (h *Hold) markLost(cause error) {
	h.lostOnce.Do(func() {
		h.cause = cause
		h.observeLost(cause) // told before Lost closes, so a holder's reaction comes after
		close(h.lost)
	})
	h.finish()
}

// finish records that the acquisition ended, once: Done closes.
func (h *Hold) finish() { h.doneOnce.Do(func() { close(h.done) }) }

// Done returns the channel closed when the acquisition ends, without watching.
func (h *Hold) Done() <-chan struct{} { return h.done }

// foundLost records that a majority no longer holds the token: Lost closes with cause.
func (h *Hold) foundLost(cause error) {
	h.lock.mu.Lock()
	h.lostUntil = cmp.Or(h.until, h.lostUntil)
	h.until = time.Time{}
	h.lock.mu.Unlock()
	h.markLost(cause)
}

// lostErr builds a loss's cause, "lock <name> lost: detail: cause", matching Lost.
func (l *Contender) lostErr(cause error, detail string) error {
	err := NewError(fmt.Sprintf("mutex: lock %q lost", l.spec.Name), l.set.Errors.Lost)
	if detail != "" {
		err.msg += ": " + detail
	}
	if cause == nil {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}
