package mutex

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
)

// ErrNoLeader is returned by Election.Leader when no candidate leads.
var ErrNoLeader = errors.New("mutex: no leader")

// Leader is who leads an election: the value it campaigned with or last
// proclaimed, and the fencing token of its leadership. The zero Leader
// means nobody leads.
type Leader struct {
	Value        string
	FencingToken uint64
}

// Election is one candidate in the election on a name: a Mutex on the name
// held with WithAutoExtend, WithFencing and the leader's value as its
// metadata (WithMetadata), so leaders exclude each other as holders do.
// Create it with redlock.(*Redlock).NewElection; its options are the
// Mutex's. Leader and Observe work without campaigning, and whatever the
// TTL: only a Campaign's must be within the restart quarantine. It is safe for
// concurrent use. See docs/design.md, "Election".
type Election struct {
	set     *engine.Set
	name    string
	opts    []Option
	err     error         // bad name or options, returned by every call
	readErr error         // err for Leader and Observe: they hold nothing (target.reading)
	poll    time.Duration // Observe's longest wait between reads: min(TTL/4, 1s)
	slot    chan struct{} // one Campaign at a time

	mu    sync.Mutex
	m     *Mutex        // the current or last leadership; nil before the first
	seq   uint64        // the last proclamation of m's leadership
	done  chan struct{} // closed when m's leadership ends; open before the first
	fence uint64        // m's fencing token
}

// electionHeader is what an Election's metadata holds before the value:
// the fencing token and the proclamation's number, in decimal, each
// followed by a space (at most 20 digits each).
const electionHeader = 42

// newElection returns a candidate for name on set: the constructor behind
// redlock.(*Redlock).NewElection. It sends nothing and never fails: a bad
// name or option is reported by every method, matching ErrInvalid.
func newElection(set *engine.Set, name string, opts ...Option) *Election {
	e := &Election{set: set, name: name, opts: opts, slot: make(chan struct{}, 1), done: make(chan struct{})}
	m := build(set, target{name: name}, e.options(""))
	e.err, e.readErr, e.poll = m.err, m.check(set, target{name: name, reading: true}), min(m.cfg.ttl/4, time.Second)
	return e
}

// options are the Mutex options of a leadership with metadata md.
func (e *Election) options(md string) []Option {
	return append(append([]Option(nil), e.opts...), WithAutoExtend(), WithFencing(), WithMetadata(md))
}

// usable returns why e cannot be used with ctx, or nil; reading: for
// Leader and Observe.
func (e *Election) usable(ctx context.Context, reading bool) error {
	switch {
	case e == nil:
		return invalid("mutex: nil *Election; create Elections with redlock.(*Redlock).NewElection")
	case e.set == nil:
		return invalid("mutex: zero Election; create Elections with redlock.(*Redlock).NewElection")
	case ctx == nil:
		return invalid("mutex: election %q: nil context.Context", e.name)
	case reading:
		return e.readErr
	}
	return e.err
}

// checkValue returns what is wrong with a leader's value, or nil.
func (e *Election) checkValue(value string) error {
	if len(value) > MaxMetadataLen-electionHeader {
		return invalid("mutex: election %q: value of %d bytes is longer than %d (MaxMetadataLen less %d)", e.name, len(value), MaxMetadataLen-electionHeader, electionHeader)
	}
	return checkMetadata(e.name, value)
}

// Campaign blocks until this candidate leads with value, as LockContext
// waits its turn (first come, first served), then keeps the leadership
// alive in the background until Resign, its loss (Done closes) or the
// set's Close; ctx ending afterwards does not end it. It returns only once
// a majority of nodes show value with the new fencing token, and only while
// it still leads (a leadership lost meanwhile is given up, and the campaign
// goes on). Errors are
// LockContext's (ctx ending leaves the queue; nothing is held); also
// ErrAlreadyHeld if this candidate leads, and ErrInvalid, with nothing
// sent, for a value over MaxMetadataLen-42 bytes or not UTF-8.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if err := e.usable(ctx, false); err != nil {
		return notObtained(err)
	}
	if err := e.checkValue(value); err != nil {
		return notObtained(err)
	}
	if err := take(ctx, e.slot); err != nil {
		return notObtained(fmt.Errorf("mutex: election %q: another Campaign of this candidate is in progress: %w", e.name, err))
	}
	defer func() { <-e.slot }()
	if e.leading() != nil {
		return engine.NewError(fmt.Sprintf("mutex: election %q: this candidate already leads", e.name), ErrAlreadyHeld, ErrNotObtained)
	}
	m, fence, err := e.win(ctx, value)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	done := e.done
	if e.m != nil { // the last leadership's channel is closed
		done = make(chan struct{})
	}
	e.m, e.seq, e.fence, e.done = m, 1, fence, done
	go func() { <-m.Done(); close(done) }() // ends with the leadership
	return nil
}

// win acquires the election's lock with value and shows its fencing token
// on a majority; a leadership lost meanwhile (its validity spent by slow
// rounds) is given up, and the campaign goes on.
func (e *Election) win(ctx context.Context, value string) (*Mutex, uint64, error) {
	for {
		m := build(e.set, target{name: e.name}, e.options(encodeLeader(0, 0, value)))
		if err := m.LockContext(ctx); err != nil {
			return nil, 0, err
		}
		// The fencing token is known only now: until a majority shows it,
		// the leadership is not visible to Leader and Observe.
		fence := m.FencingToken()
		if err := m.setMetadata(ctx, encodeLeader(fence, 1, value)); err != nil {
			_ = m.UnlockContext(context.WithoutCancel(ctx))
			return nil, 0, notObtained(fmt.Errorf("mutex: election %q: won, but could not show the new leader on a majority; resigned: %w", e.name, err))
		}
		select {
		case <-m.Done():
			_ = m.UnlockContext(context.WithoutCancel(ctx))
		default:
			return m, fence, nil
		}
	}
}

// leading returns the Mutex of the current leadership, or nil.
func (e *Election) leading() *Mutex {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || e.m.current() == nil {
		return nil
	}
	select {
	case <-e.m.Done():
		return nil
	default:
		return e.m
	}
}

// Proclaim replaces the leader's value, on a majority, without a new
// election; Leader and Observe then report it. Errors: ErrNotHeld if this
// candidate does not lead (or the leadership was found lost);
// ErrNodesUnavailable or ctx's error if too few nodes answered (some may
// show the new value); ErrInvalid, nothing sent, for a value Campaign
// refuses; ErrClosed after the node set's Close. It waits at most the
// per-node timeout.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := e.usable(ctx, false); err != nil {
		return notObtained(err)
	}
	if err := e.checkValue(value); err != nil {
		return err
	}
	if err := e.set.ErrIfClosed("mutex: proclaim in election %q: the node set was closed, which ended the leadership if this candidate led; nothing sent", e.name); err != nil {
		return err
	}
	m := e.leading()
	if m == nil {
		return engine.NewError(fmt.Sprintf("mutex: proclaim in election %q: this candidate does not lead", e.name), ErrNotHeld)
	}
	e.mu.Lock()
	e.seq++
	md := encodeLeader(e.fence, e.seq, value)
	e.mu.Unlock()
	return m.setMetadata(ctx, md)
}

// Resign ends this candidate's leadership: the lock is released, so another
// candidate may lead at once, and Done closes. A candidate that never led,
// or whose release a majority confirmed, gets nil, with nothing sent; after
// the node set's Close (which ended any leadership), ErrClosed. Errors are
// UnlockContext's, but for ErrNotHeld (the leadership had ended already):
// nil. After ErrNodesUnavailable or ctx's error the leadership has ended all
// the same (Done closes, Until and FencingToken are zero): the release goes
// on in the background, and another candidate may lead as soon as the nodes
// answer it. Call Resign again to confirm it, or its keys expire with the TTL.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.usable(ctx, false); err != nil {
		return err
	}
	if err := e.set.ErrIfClosed("mutex: resign from election %q: the node set was closed, which ended the leadership if this candidate led; nothing sent", e.name); err != nil {
		return err
	}
	e.mu.Lock()
	m := e.m // held, its release perhaps unconfirmed, though Done has closed
	e.mu.Unlock()
	if m == nil || m.current() == nil {
		return nil
	}
	if err := m.UnlockContext(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("mutex: resign from election %q: %w", e.name, err)
	}
	return nil
}

// Done returns a channel closed when this candidate's current leadership
// ends, lost, resigned or released by the set's Close; after it ended and
// until the next win, the last leadership's (closed). Before the first win
// it is open, and closes when that leadership ends.
func (e *Election) Done() <-chan struct{} {
	if e == nil || e.set == nil {
		return ended
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m != nil { // closed with the acquisition, not by a goroutine after it
		return e.m.Done()
	}
	return e.done
}

// encodeLeader is the metadata of a leadership: its fencing token, the
// number of its proclamation (0 until Campaign showed the token), and value.
func encodeLeader(fence, seq uint64, value string) string {
	return strconv.FormatUint(fence, 10) + " " + strconv.FormatUint(seq, 10) + " " + value
}

// decodeLeader reads encodeLeader's metadata; false if it is not one.
func decodeLeader(md string) (fence, seq uint64, value string, ok bool) {
	f, rest, ok1 := strings.Cut(md, " ")
	s, value, ok2 := strings.Cut(rest, " ")
	fence, err1 := strconv.ParseUint(f, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	return fence, seq, value, ok1 && ok2 && err1 == nil && err2 == nil
}
