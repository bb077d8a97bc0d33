package mutex

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// Mutex is a lock on one name, held on a majority of the independent Redis
// nodes of a set, following the Redlock algorithm. Create it with
// redlock.(*Redlock).NewMutex; the zero Mutex is not usable (its methods
// return an error matching ErrInvalid).
//
// A Mutex holds at most one acquisition at a time, from a successful
// LockContext or TryLockContext until UnlockContext (which ends it whatever it
// returns, except ErrNodesUnavailable or ctx's error, after which it can be
// retried). While it holds one, even one whose validity has ended,
// LockContext returns ErrAlreadyHeld at once instead of waiting: it is not
// reentrant, and it never lets a late UnlockContext from one piece of code
// release an acquisition made since by another. Give each goroutine or job
// its own Mutex; Mutexes are cheap, and two Mutexes (or two processes)
// locking the same name exclude each other.
//
// A Mutex is safe for concurrent use by several goroutines: its calls are
// serialized, a call waiting (respecting its ctx) until a call in progress on
// the same Mutex returns.
type Mutex struct {
	set     *node.Set
	name    string
	key     string
	channel string      // the key's release channel; "" without notifications
	calls   *node.Calls // the scripts' arguments that do not change
	cfg     config
	err     error         // bad configuration, returned by every call
	timeout time.Duration // per-node timeout
	drift   time.Duration // drift allowance for cfg.ttl

	op    chan struct{} // one slot: the goroutine holding it owns lanes
	lanes []lane

	mu        sync.Mutex // guards the fields below
	token     string     // token of the latest acquisition
	until     time.Time  // end of the validity; zero once lost or released
	renewedAt time.Time  // start of the round that set until
	held      bool       // keys under token may exist on the nodes
	// released: an UnlockContext that began within the validity sent the
	// release and could not confirm it; the work under the lock ended then,
	// so a retry that finds our keys gone, even after the validity, is done.
	released bool
	fenceNo  uint64 // fencing number of the acquisition (WithFencing)
	lease    *lease // the latest acquisition's lease; nil before the first
}

// New returns a Mutex for name on set. It is the constructor behind
// redlock.(*Redlock).NewMutex, which is what applications call; set must come
// from there. New never fails: a bad name or option is reported, matching
// ErrInvalid, by every method of the returned Mutex, and nothing is sent to
// the nodes.
func New(set *node.Set, name string, opts ...Option) *Mutex {
	m := &Mutex{set: set, name: name, key: name, cfg: defaultConfig(), op: make(chan struct{}, 1)}
	for _, opt := range opts {
		if opt != nil {
			opt(&m.cfg)
		}
	}
	if set != nil {
		m.key = set.KeyPrefix + name
	}
	m.err = m.check()
	if m.err == nil {
		if set.Notify {
			m.channel = node.Channel(m.key)
		}
		m.cfg.ttl = m.cfg.ttl.Truncate(time.Millisecond)
		m.timeout = set.Timeout(m.cfg.ttl)
		m.drift = clock.DriftAllowance(m.cfg.ttl, set.DriftFactor)
		m.lanes = make([]lane, len(set.Nodes))
		m.calls = node.NewCalls(m.key, m.cfg.ttl, m.channel)
	}
	return m
}

func (m *Mutex) check() error {
	c := m.cfg
	switch {
	case m.set == nil || len(m.set.Nodes) == 0 || m.set.Clock == nil:
		return invalid("mutex: %q has no node set; create Mutexes with redlock.New(...).NewMutex", m.name)
	case m.name == "":
		return invalid("mutex: empty lock name")
	case len(m.set.KeyPrefix)+len(m.name) > MaxNameLen:
		return invalid("mutex: lock name of %d bytes (with key prefix) is longer than %d", len(m.set.KeyPrefix)+len(m.name), MaxNameLen)
	case c.ttl < time.Millisecond:
		return invalid("mutex: %q: TTL %v is under 1ms, the granularity of Redis expiry", m.name, c.ttl)
	case clock.Validity(c.ttl.Truncate(time.Millisecond), 0, m.set.DriftFactor) <= 0:
		return invalid("mutex: %q: TTL %v leaves no validity after the drift allowance of %v", m.name, c.ttl,
			clock.DriftAllowance(c.ttl, m.set.DriftFactor))
	case c.tries < 0:
		return invalid("mutex: %q: negative number of tries %d (0 means no limit)", m.name, c.tries)
	case c.retryDelayMin <= 0 || c.retryDelayMax < c.retryDelayMin:
		return invalid("mutex: %q: retry delays [%v, %v] must satisfy 0 < min <= max", m.name, c.retryDelayMin, c.retryDelayMax)
	case c.extendInterval < 0 || c.extendInterval > c.ttl/2 || (c.extendInterval > 0 && c.extendInterval < c.ttl/100):
		return invalid("mutex: %q: extend interval %v must be 0 (a third of the TTL) or between TTL/100 and TTL/2 (TTL %v)", m.name, c.extendInterval, c.ttl)
	case c.autoExtend && renewalTooLate(c, m.set.DriftFactor):
		return invalid("mutex: %q: with a drift allowance of %v, the validity of a %v TTL ends before the first renewal (every %v) could run; shorten the extend interval",
			m.name, clock.DriftAllowance(c.ttl, m.set.DriftFactor), c.ttl, intervalOf(c))
	case c.maxExtends < 0:
		return invalid("mutex: %q: negative number of extensions %d (0 means no limit)", m.name, c.maxExtends)
	case m.key == m.set.MarkerKey() || m.key == m.set.FenceKey():
		return invalid("mutex: %q: the key %q is reserved for the library's own bookkeeping", m.name, m.key)
	}
	return nil
}

// Name returns the lock's name, as given to NewMutex.
func (m *Mutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Key returns the Redis key the lock uses on every node: the set's key prefix
// followed by the name.
func (m *Mutex) Key() string {
	if m == nil {
		return ""
	}
	return m.key
}

// Value returns the token of the latest acquisition, the value the lock key
// holds on the nodes; "" before the first one. Every acquisition draws a new
// random token.
func (m *Mutex) Value() string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.token
}

// Until returns the end of the lock's validity: the time until which no other
// owner can obtain it, computed as start + TTL - elapsed - drift allowance and
// moved forward by each successful extension. It is the zero Time when the
// Mutex does not hold the lock (never locked, released, or found lost because
// a majority no longer holds its token). When Lost closed because no
// extension came in time, Until keeps the end of the validity, which is then
// about to pass. Work under the lock must end before Until.
func (m *Mutex) Until() time.Time {
	if m == nil {
		return time.Time{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.until
}

// LockContext obtains the lock, retrying until it succeeds, ctx is done, or the
// number of tries set with WithTries is used up (no limit by default: without a
// deadline on ctx it may block forever).
//
// Each attempt sends the acquire script to every node in parallel and succeeds
// when a majority (N/2+1) took the key and the validity left is positive. It
// decides as soon as the outcome is known, without waiting for slower nodes, and
// waits at most the per-node timeout for any node. A failed attempt releases
// whatever it took, on every node that may hold it, before the next one; the
// sleep between attempts is an exponential backoff with full jitter, cut short
// by ctx.
//
// On failure the error matches ErrNotObtained; also ErrNodesUnavailable when
// failing nodes rather than other owners prevented a majority (with a
// *NodeError per failed node); also ctx.Err() when ctx ended the wait, joined
// with the cause of the last attempt that reached an outcome; also
// ErrAlreadyHeld when this Mutex holds an acquisition not yet released with
// UnlockContext; also ErrInvalid for bad configuration. In the last two cases
// nothing is sent. On success Until and Value describe the lock.
//
// Each attempt uses a token of its own, so a command of a failed attempt that
// reaches a node late can never count for, or delete, a later one.
func (m *Mutex) LockContext(ctx context.Context) error { return m.lock(ctx, 0) }

// TryLockContext makes exactly one attempt to obtain the lock: it behaves like
// LockContext with WithTries(1), returning the same errors. It blocks for at
// most twice the per-node timeout: once for the attempt, once for releasing a
// partial acquisition on the nodes that answered (cut short if ctx ends);
// three times with WithFencing, whose number is written back to a majority
// after the attempt; plus, if another Mutex of the same Redlock is in an
// attempt on the same name, until that attempt ends.
//
// Attempts on one name by the Mutexes of one Redlock take turns rather than
// run at the same moment, so that simultaneous TryLockContext calls in one
// process never split the votes between them: exactly one of them wins while
// the lock is free, and the others get ErrNotObtained because it holds the
// lock. Calls in other processes can still split with them; then all of them
// fail with ErrNotObtained, and a retry settles it.
func (m *Mutex) TryLockContext(ctx context.Context) error { return m.lock(ctx, 1) }

// lock obtains the lock in at most tries attempts; 0: those of WithTries.
func (m *Mutex) lock(ctx context.Context, tries int) (err error) {
	if err := m.usable(ctx); err != nil {
		return notObtained(err)
	}
	if tries == 0 {
		tries = m.cfg.tries
	}
	if err := m.begin(ctx); err != nil {
		return withCtx(&opError{msg: fmt.Sprintf("mutex: lock %q not obtained: another call on this Mutex is in progress", m.name), is: []error{ErrNotObtained}}, err)
	}
	defer m.end()
	if _, held := m.state(); held {
		return &opError{
			msg: fmt.Sprintf("mutex: lock %q not obtained: this Mutex holds an acquisition that UnlockContext has not released (%s); unlock it first",
				m.name, m.describeValidity()),
			is: []error{ErrAlreadyHeld, ErrNotObtained},
		}
	}
	if err := ctx.Err(); err != nil {
		return withCtx(&opError{msg: fmt.Sprintf("mutex: lock %q not obtained: nothing sent", m.name), is: []error{ErrNotObtained}}, err)
	}
	var last error          // the cause of the latest attempt that was decided
	var waiter *node.Waiter // queued for release notifications once the lock was found held
	defer func() {
		switch {
		case waiter == nil:
		case err == nil:
			waiter.Stop() // the lock is ours: the next in line waits for our release
		default:
			waiter.GiveUp() // the next in line looks at the lock now
		}
	}()
	if tries != 1 && m.set.Notify && m.set.Queued(m.channel) {
		// Others of this process already wait for this lock: queue behind
		// them rather than cut in, which would only split the votes with the
		// one the next release wakes.
		waiter = m.set.Wait(m.channel)
		if err := m.wait(ctx, m.queuedWait(0), waiter); err != nil {
			return withCtx(&opError{msg: fmt.Sprintf("mutex: lock %q not obtained: still queued behind other waiters of this process", m.name), is: []error{ErrNotObtained}}, err)
		}
	}
	for attempt := 0; ; attempt++ {
		if waiter != nil {
			select { // a wake-up from before this attempt: the attempt sees the nodes as they are
			case <-waiter.Wake():
			default:
			}
		}
		err, decided, holderTTL := m.acquire(ctx)
		if err == nil {
			return nil
		}
		if decided || last == nil {
			last = err
		}
		if cerr := ctx.Err(); cerr != nil {
			return withCtx(last, cerr)
		}
		if tries > 0 && attempt+1 >= tries {
			return err
		}
		wait := m.backoff(attempt)
		if holderTTL > 0 {
			// Held by another owner: queue for its release, and look again
			// at the latest when its key expires (if it crashed). While
			// queued, the backoff is only a fallback for a lost message: a
			// waiter polling on a short timer would only collide with the
			// one the release woke.
			if m.set.Notify {
				if waiter == nil {
					waiter = m.set.Wait(m.channel)
				}
				wait = m.queuedWait(holderTTL)
			}
			wait = min(wait, holderTTL)
		}
		if werr := m.wait(ctx, wait, waiter); werr != nil {
			return withCtx(last, werr)
		}
	}
}

// acquire makes one attempt, under a token of its own: a command of an earlier
// attempt that reaches a node late (delayed in the network beyond the client's
// timeouts) can then never count for, or delete, a later one. decided is false
// when ctx ended the attempt before its outcome was known. When another owner
// holds the lock, holderTTL is the shortest remaining TTL of its keys, the
// soonest a retry could find one expired; 0 otherwise.
func (m *Mutex) acquire(ctx context.Context) (err error, decided bool, holderTTL time.Duration) {
	// Attempts of this process on the same key take turns, so that they never
	// split the votes between them (see node.Gate).
	gate, err := m.set.BeginAttempt(ctx, m.key)
	if err != nil {
		return withCtx(&opError{msg: fmt.Sprintf("mutex: lock %q not obtained: nothing sent; waited for another attempt of this process on the same lock", m.name), is: []error{ErrNotObtained}}, err), false, 0
	}
	defer gate.End()
	token := node.NewToken()
	ttl, clk := m.cfg.ttl, m.set.Clock
	cmdCtx := detached(ctx) // an abandoned command still completes, so its release can follow it
	call := m.calls.Acquire(token)
	start := clk.Now()
	round, sent := fanout(m, nil, true, func(n *node.Node, _ *lane) (quorum.Vote, grant, error) {
		return m.ask(cmdCtx, n, token, call)
	})
	timer := clk.NewTimer(min(m.timeout, ttl-m.drift))
	_ = round.Decide(ctx, timer.C())
	t := round.Tally()
	var fence uint64
	var fenceErr *opError
	if t.Won() && m.cfg.fencing {
		fence, fenceErr = m.fence(ctx, token, round, sent, timer.C(), start)
	}
	timer.Stop()
	var why string
	is := []error{ErrNotObtained}
	switch elapsed := clk.Since(start); {
	case fenceErr != nil:
		m.rollback(ctx, token, round, sent)
		return fenceErr, true, 0
	case t.Won():
		if v := clock.Validity(ttl, elapsed, m.set.DriftFactor); v > 0 {
			m.mu.Lock()
			m.token, m.until, m.held, m.fenceNo, m.renewedAt = token, start.Add(v), true, fence, start
			m.released = false
			m.lease = nil // a new acquisition: a new lease, made when first needed
			if m.cfg.autoExtend {
				m.watchLocked(true)
			}
			m.mu.Unlock()
			return nil, true, 0
		}
		why = fmt.Sprintf("a majority answered after %v, which leaves no validity of the %v TTL (drift allowance %v)", elapsed, ttl, m.drift)
	case !t.Decided():
		why = "interrupted before a majority answered"
	case t.Unavailable():
		why = fmt.Sprintf("%d of %d nodes failed, so no majority of %d is possible", t.Failed, t.N, t.Need)
		if budget := ttl - m.drift; budget < m.timeout {
			why += fmt.Sprintf("; note the %v TTL leaves nodes only %v to answer", ttl, budget)
		}
		is = append(is, ErrNodesUnavailable)
	default:
		why = fmt.Sprintf("held by another owner on %d of %d nodes", t.No, t.N)
		holderTTL = soonestExpiry(round)
	}
	m.rollback(ctx, token, round, sent)
	return &opError{
		msg:   fmt.Sprintf("mutex: lock %q not obtained: %s (%v)", m.name, why, t),
		is:    is,
		nodes: nodeErrors(round, m.addr),
	}, t.Decided(), holderTTL
}

// soonestExpiry returns the shortest remaining TTL among the keys of other
// owners that refused the round (at least 1ms: a key about to expire reports
// 0), or 0 if none has one.
func soonestExpiry(round *quorum.Round[grant]) time.Duration {
	var soonest time.Duration
	for _, rep := range round.Replies() {
		// PTTL: -1 no expiry (not a lock of ours), -2 gone since the GET.
		ttl := max(rep.Value.holderTTL, time.Millisecond)
		if rep.Vote == quorum.No && rep.Value.holderTTL != -time.Millisecond && (soonest == 0 || ttl < soonest) {
			soonest = ttl
		}
	}
	return soonest
}

// grant is what one node answered to an acquire.
type grant struct {
	holderTTL time.Duration // the other holder's remaining TTL, on a No
	fence     int64         // as node.Reply.Fence, 0 if the node may not vouch; -1 when not asked
	counter   int64         // as node.Reply.Counter: the node's counter, trusted or not
}

// ask sends one node the acquire script: the plain one, or the extended one
// when the Mutex wants a fencing number or the set keeps restarted nodes in
// quarantine. A node in quarantine votes Failed, whatever it answered.
func (m *Mutex) ask(ctx context.Context, n *node.Node, token string, call node.Call) (quorum.Vote, grant, error) {
	set := m.set
	if !m.cfg.fencing && set.Quarantine == 0 {
		ok, holderTTL, err := n.Acquire(ctx, call)
		switch {
		case err != nil:
			return quorum.Failed, grant{fence: -1}, err
		case ok:
			return quorum.Yes, grant{fence: -1}, nil
		}
		return quorum.No, grant{holderTTL: holderTTL, fence: -1}, nil
	}
	var marker string
	if set.Quarantine > 0 {
		marker = node.NewToken()
	}
	r, err := n.AcquireExt(ctx, set.ExtScript, m.key, set.MarkerKey(), set.FenceKey(), token, m.cfg.ttl, marker, m.cfg.fencing)
	if err != nil {
		return quorum.Failed, grant{fence: -1}, err
	}
	g := grant{holderTTL: r.HolderTTL, fence: r.Fence, counter: r.Counter}
	if set.Quarantine > 0 {
		until, err := n.Quarantined(ctx, r.Marker, r.ScriptMissing, set.Quarantine, set.Clock.Now)
		if err != nil {
			return quorum.Failed, g, err
		}
		if g.fence > 0 && n.FenceStale() {
			g.fence = 0 // its counter may be an old one restored from a snapshot: it does not vouch
		}
		if set.Clock.Now().Before(until) {
			return quorum.Failed, g, &quarantineError{until: until}
		}
	}
	if r.Acquired {
		return quorum.Yes, g, nil
	}
	return quorum.No, g, nil
}

// rollback releases token on every node the failed round sent the acquire to,
// except those that answered No. Each release is queued behind that node's
// acquire, so an acquire that is still running when the round gives up is
// undone after it, never overtaken; the release is not sent at all if that
// late acquire turns out to have been a No. It waits for the nodes that had
// answered (at most the per-node timeout, and no longer than ctx), and leaves
// the releases queued behind unanswered acquires to complete on their own.
// The releases themselves run whatever becomes of ctx.
func (m *Mutex) rollback(ctx context.Context, token string, round *quorum.Round[grant], sent sends) {
	n := len(sent)
	answered, inFlight := make([]bool, n), make([]bool, n)
	for i := range n {
		v := round.Vote(i)
		switch {
		case !sent.sent(i) || v == quorum.No:
		case v == quorum.Pending || m.timedOut(round, i):
			inFlight[i] = true
		default:
			answered[i] = true
		}
	}
	m.release(ctx, token, answered, true, false)
	m.release(ctx, token, inFlight, false, true)
}

func (m *Mutex) timedOut(round *quorum.Round[grant], i int) bool {
	for _, rep := range round.Replies() {
		if rep.Node == i {
			return errors.Is(rep.Err, quorum.ErrDeadline)
		}
	}
	return false
}

// release sends the release script for token to the nodes in mask and, if
// wait, collects the answers for at most the per-node timeout or until ctx
// ends. The commands themselves are not cancelled by ctx. With unlessRefused,
// a node whose previous command answered No is skipped: that acquire did not
// take the key, so there is nothing to release.
func (m *Mutex) release(ctx context.Context, token string, mask []bool, wait, unlessRefused bool) {
	cmdCtx := detached(ctx)
	call := m.calls.Release(token)
	round, _ := fanout(m, mask, false, func(n *node.Node, l *lane) (quorum.Vote, node.Release, error) {
		if unlessRefused && l.previous() == quorum.No {
			return quorum.No, node.Missing, nil
		}
		r, err := n.Release(cmdCtx, call)
		if err != nil {
			return quorum.Failed, r, err
		}
		return quorum.Yes, r, nil
	})
	if wait {
		timer := m.set.Clock.NewTimer(m.timeout)
		_ = round.Collect(ctx, timer.C())
		timer.Stop()
	}
}

// ExtendContext resets the lock's TTL to the full TTL on a majority of nodes,
// only where the key still holds this Mutex's token (token-checked PEXPIRE, the
// Redlock spec's extension), and moves Until to the new end of validity. It
// never recreates a key that expired or passed to someone else. It waits at
// most the per-node timeout, decides as soon as a majority answered, and
// returns early with ctx.Err() (joined with the cause) if ctx ends first.
//
// Errors: ErrNotHeld when this Mutex holds no lock, when a majority no longer
// holds its token (the lock expired or passed to another owner; Until becomes
// zero), or when the extension took so long that no validity is left;
// ErrNodesUnavailable (with a *NodeError per failed node) when too few nodes
// answered to tell, in which case Until keeps its previous value. A failed
// Extend releases nothing: call UnlockContext to clean up.
func (m *Mutex) ExtendContext(ctx context.Context) error {
	if err := m.usable(ctx); err != nil {
		return err
	}
	if err := m.begin(ctx); err != nil {
		return fmt.Errorf("mutex: extend %q: another call on this Mutex is in progress: %w", m.name, err)
	}
	defer m.end()
	if err := ctx.Err(); err != nil {
		if _, held := m.state(); held {
			return fmt.Errorf("mutex: extend %q: nothing sent: %w", m.name, err)
		}
	}
	err := m.extend(ctx, m.timeout)
	if err == nil {
		m.mu.Lock()
		if m.lease != nil {
			select {
			case m.lease.nudge <- struct{}{}: // Until moved: the watcher recomputes
			default:
			}
		}
		m.mu.Unlock()
	}
	return err
}

// extend is one extension round, waiting at most wait for the nodes (and the
// per-node timeout); the caller holds the op slot. It is shared by
// ExtendContext and the lease's automatic renewals. Finding the token gone on
// a majority closes Lost.
func (m *Mutex) extend(ctx context.Context, wait time.Duration) error {
	token, held := m.state()
	if !held {
		return &opError{msg: fmt.Sprintf("mutex: extend %q: this Mutex does not hold the lock", m.name), is: []error{ErrNotHeld}}
	}
	ttl, clk := m.cfg.ttl, m.set.Clock
	cmdCtx := detached(ctx)
	call := m.calls.Extend(token)
	start := clk.Now()
	round, _ := fanout(m, nil, true, func(n *node.Node, _ *lane) (quorum.Vote, bool, error) {
		return boolVote(n.Extend(cmdCtx, call))
	})
	timer := clk.NewTimer(min(m.timeout, ttl-m.drift, wait))
	derr := round.Decide(ctx, timer.C())
	timer.Stop()
	t := round.Tally()
	nodes := nodeErrors(round, m.addr)
	var err *opError
	switch elapsed := clk.Since(start); {
	case t.Won():
		if v := clock.Validity(ttl, elapsed, m.set.DriftFactor); v > 0 {
			m.mu.Lock()
			m.until, m.renewedAt = start.Add(v), start
			m.mu.Unlock()
			return nil
		}
		err = &opError{
			msg:   fmt.Sprintf("mutex: extend %q: a majority answered after %v, which leaves no validity of the %v TTL; treat the lock as lost (%v)", m.name, elapsed, ttl, t),
			is:    []error{ErrNotHeld},
			nodes: nodes,
		}
	case !t.Decided():
		return withCtx(&opError{msg: fmt.Sprintf("mutex: extend %q interrupted before a majority answered (%v)", m.name, t), nodes: nodes}, derr)
	case t.Unavailable():
		return &opError{
			msg:   fmt.Sprintf("mutex: extend %q: too few nodes answered to extend the lock (%v)", m.name, t),
			is:    []error{ErrNodesUnavailable},
			nodes: nodes,
		}
	default:
		err = &opError{
			msg:   fmt.Sprintf("mutex: extend %q: lock not held: a majority no longer holds this Mutex's token; it expired or passed to another owner (%v)", m.name, t),
			is:    []error{ErrNotHeld},
			nodes: nodes,
		}
	}
	m.mu.Lock()
	m.until = time.Time{}
	m.mu.Unlock()
	m.markLost(m.lostError(err, ""))
	return err
}

// UnlockContext releases the lock: it sends the token-checked delete to every
// node in parallel (each after any command still in flight to that node from
// this Mutex) and returns as soon as a majority confirmed, leaving the releases
// on slower nodes to complete in the background. It sends the release even when
// ctx is already done, because a cancelled request must still release its lock,
// and it waits at most the per-node timeout for it; before that, it waits for
// an automatic renewal in flight (WithAutoExtend) to end, which takes at most
// another per-node timeout. ctx only bounds the wait for another call in
// progress on the same Mutex.
//
// A node counts as released when it deleted the key, or when the key is
// already gone while the validity has not ended (only a release of ours can
// have removed it then: a reply lost and the command retried by the client, or
// an earlier UnlockContext that gave up waiting).
//
// Errors: ErrNotHeld when this Mutex holds no acquisition (nothing is sent),
// or when a majority no longer held its token: the lock had expired or passed
// to another owner, so the work under it may have overlapped someone else's
// (the keys of the other owner are left intact). ErrNodesUnavailable (with a
// *NodeError per failed node) when too few nodes answered to confirm the
// release; the Mutex then keeps its acquisition, so UnlockContext can be
// called again, and unreleased keys expire with their TTL (automatic
// renewals have stopped; Lost still closes before the validity ends). If
// that first call began within the validity, a retry counts every node where
// our key is gone as released, even after the validity: the work had ended,
// so finding the keys expired is no sign of an overlap. ctx's
// error when ctx ended while another call on this Mutex was in progress:
// nothing was sent, and the acquisition goes on as before, still renewed
// under WithAutoExtend. After any other outcome the Mutex holds nothing and
// can lock again.
func (m *Mutex) UnlockContext(ctx context.Context) error {
	if err := m.usable(ctx); err != nil {
		return err
	}
	// No renewal may start, or still be in flight, once the release is sent.
	// Stopping the renewals first also frees the op slot they may hold, so a
	// cancelled ctx does not turn a renewal in progress into "busy".
	watched, renewing := m.endLease()
	if err := m.begin(ctx); err != nil {
		m.resumeLease(watched, renewing)
		return fmt.Errorf("mutex: unlock %q: ctx ended while another call on this Mutex was in progress; nothing sent, the acquisition goes on as before (renewed if it was): %w", m.name, err)
	}
	defer m.end()
	token, held := m.state()
	if !held {
		return &opError{msg: fmt.Sprintf("mutex: unlock %q: this Mutex does not hold the lock", m.name), is: []error{ErrNotHeld}}
	}
	cmdCtx := detached(ctx)
	call := m.calls.Release(token)
	m.mu.Lock()
	until, retry := m.until, m.released
	m.mu.Unlock()
	clk := m.set.Clock
	inTime := clk.Now().Before(until)
	round, _ := fanout(m, nil, false, func(n *node.Node, _ *lane) (quorum.Vote, node.Release, error) {
		r, err := n.Release(cmdCtx, call)
		switch {
		case err != nil:
			return quorum.Failed, r, err
		case r == node.Released:
			return quorum.Yes, r, nil
		case r == node.Missing && clk.Now().Before(until):
			// Within the validity our key cannot have expired: an earlier
			// release of ours got there first (a retried command, or the
			// queued release of an Unlock that gave up waiting).
			return quorum.Yes, r, nil
		case retry:
			// Our key is gone, released by the earlier UnlockContext's
			// commands or expired since. The work ended when that call
			// began, within the validity: nothing could overlap it.
			return quorum.Yes, r, nil
		}
		return quorum.No, r, nil
	})
	timer := m.set.Clock.NewTimer(m.timeout)
	_ = round.Decide(context.Background(), timer.C())
	timer.Stop()
	t := round.Tally()
	if t.Unavailable() {
		if inTime {
			m.mu.Lock()
			m.released = true
			m.mu.Unlock()
		}
		m.keepWatching()
		return &opError{
			msg:   fmt.Sprintf("mutex: unlock %q: too few nodes answered to confirm the release; retry UnlockContext, or the keys expire with their TTL (%v)", m.name, t),
			is:    []error{ErrNodesUnavailable},
			nodes: nodeErrors(round, m.addr),
		}
	}
	m.mu.Lock()
	m.held, m.until = false, time.Time{}
	m.mu.Unlock()
	if t.Won() {
		if m.set.Notify {
			m.set.Released(m.channel, token) // the next waiter in this process goes at once
		}
		return nil
	}
	err := &opError{
		msg:   fmt.Sprintf("mutex: unlock %q: lock not held: a majority no longer held this Mutex's token; it had expired or passed to another owner (%v)", m.name, t),
		is:    []error{ErrNotHeld},
		nodes: nodeErrors(round, m.addr),
	}
	m.markLost(m.lostError(err, "found at unlock"))
	return err
}

// keepWatching starts, after an UnlockContext that left the acquisition held,
// a watcher that no longer renews but still closes Lost before the validity
// ends, unless the acquisition is already lost or released.
func (m *Mutex) keepWatching() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held && m.lease != nil && m.lease.lostCause() == nil {
		m.watchLocked(false)
	}
}

// usable returns why the Mutex cannot be used with ctx, if it cannot: a nil
// ctx or Mutex, bad configuration, or a zero Mutex that no constructor made.
func (m *Mutex) usable(ctx context.Context) error {
	switch {
	case m == nil:
		return invalid("mutex: nil *Mutex; create Mutexes with redlock.(*Redlock).NewMutex")
	case ctx == nil:
		return invalid("mutex: %q: nil context.Context; pass context.Background() or a request's ctx", m.name)
	case m.op == nil:
		return invalid("mutex: zero Mutex; create Mutexes with redlock.(*Redlock).NewMutex")
	}
	return m.err
}

// begin takes the Mutex's op slot, waiting for a call in progress to return.
// A free slot is taken even if ctx is already done.
func (m *Mutex) begin(ctx context.Context) error {
	select {
	case m.op <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Mutex) end() { <-m.op }

func (m *Mutex) state() (token string, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.token, m.held
}

// intervalOf is the extend interval of c: WithExtendInterval, or TTL/3.
func intervalOf(c config) time.Duration {
	if c.extendInterval > 0 {
		return c.extendInterval
	}
	return c.ttl / 3
}

// renewalTooLate reports whether, at zero elapsed time, the first automatic
// renewal would come after the loss deadline (validity end minus TTL/10).
func renewalTooLate(c config, driftFactor float64) bool {
	return intervalOf(c) >= clock.Validity(c.ttl, 0, driftFactor)-c.ttl/10
}

// describeValidity says, for errors, where the held acquisition's validity
// stands.
func (m *Mutex) describeValidity() string {
	until := m.Until()
	switch {
	case until.IsZero():
		return "found lost"
	case m.set.Clock.Now().Before(until):
		return "valid until " + until.Format(time.RFC3339Nano)
	}
	return "validity ended " + until.Format(time.RFC3339Nano)
}

// queuedWait is how long a waiter queued for release notifications sleeps
// before it looks again on its own, in case a message was lost: between half
// and all of the largest retry delay, and no longer than holderTTL (when
// known, > 0), when the holder's key expires.
func (m *Mutex) queuedWait(holderTTL time.Duration) time.Duration {
	d := m.cfg.retryDelayMax/2 + rand.N(m.cfg.retryDelayMax/2+1)
	if holderTTL > 0 {
		d = min(d, holderTTL)
	}
	return d
}

// backoff returns the sleep before attempt+1: uniform in [0, min(max, min*2^attempt)).
func (m *Mutex) backoff(attempt int) time.Duration {
	ceiling := m.cfg.retryDelayMax
	if attempt < 62 {
		if d := m.cfg.retryDelayMin << attempt; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return rand.N(ceiling)
}

func (m *Mutex) addr(i int) string { return m.set.Nodes[i].Addr() }

func boolVote(ok bool, err error) (quorum.Vote, bool, error) {
	switch {
	case err != nil:
		return quorum.Failed, false, err
	case ok:
		return quorum.Yes, true, nil
	}
	return quorum.No, false, nil
}

// detached returns ctx without its cancellation, for commands that must run to
// completion whatever becomes of the caller's ctx (only its values are kept).
// A ctx that can never be cancelled is returned as it is.
func detached(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// notObtained adds ErrNotObtained to what err matches.
func notObtained(err error) error {
	var oe *opError
	if errors.As(err, &oe) {
		return &opError{msg: oe.msg, is: append([]error{ErrNotObtained}, oe.is...), nodes: oe.nodes}
	}
	return fmt.Errorf("%w: %w", ErrNotObtained, err)
}
