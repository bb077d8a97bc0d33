package idempotency

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/construct"
	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

var (
	// ErrInProgress is returned by Do while another call with the key runs
	// its work, in this process or another (with WithWait: when ctx ended
	// first, with ctx's error), or when calls with the key in other
	// processes at the same moment split the nodes' votes, which failed
	// nodes make likely: then none of them runs. The work did not run; try
	// again later.
	ErrInProgress = errors.New("idempotency: a call with this key is in progress")

	// ErrKeyReused is returned by Do when the key completed with a different
	// request: the work did not run, nothing is replayed.
	ErrKeyReused = errors.New("idempotency: key already used with a different request")

	// ErrNotRecorded is returned by Do when the work ran and succeeded, but
	// fewer than a majority of the nodes confirmed its record (they failed,
	// and did not answer again while ctx lasted and the lock was valid; or
	// the lock was lost; or the response was too large): a retry may replay
	// it or run the work again. The record is still sent to each node whose
	// answer was lost once it answers again, while this process runs, and
	// written where no other run took the key since. The error also matches
	// mutex.ErrNodesUnavailable or mutex.ErrLost when one of those was why.
	ErrNotRecorded = errors.New("idempotency: the work ran but its response was not recorded")
)

// MaxKeyLen is the longest key Do accepts, in bytes.
const MaxKeyLen = 255

// Store remembers, on a majority of a Redlock's nodes, the response of the
// first successful call of Do with each key, for the retention period. It
// is safe for concurrent use; Stores over the same nodes with the same key
// prefix, in any process, share their records.
type Store struct {
	set  *engine.Set
	cfg  config
	bad  error        // a nil rs or an invalid option, reported by Do
	look *node.Script // lookup.lua, this Store's copy (see node.Script.Unique)
}

// New returns a Store over rs's nodes. It sends nothing and never fails: a
// nil rs or an invalid option is reported by every Do, matching
// mutex.ErrInvalid. Closing rs ends the Store (Do then fails with
// mutex.ErrClosed).
func New(rs *redlock.Redlock, opts ...Option) *Store {
	s := &Store{cfg: config{retention: 24 * time.Hour, ttl: timing.DefaultTTL, prefix: "idempotency:", maxResp: 1 << 20}}
	for _, opt := range opts {
		if opt != nil {
			opt(&s.cfg)
		}
	}
	s.bad = s.cfg.check()
	s.set = construct.NodeSet.(func(*redlock.Redlock) *engine.Set)(rs)
	switch {
	case rs == nil:
		s.bad = invalid("idempotency: New: nil *redlock.Redlock")
	case s.set == nil:
		s.bad = invalid("idempotency: New: zero redlock.Redlock; create it with redlock.New or redlock.NewFromURLs")
	case s.bad == nil && s.set.Quarantine > 0 && s.cfg.ttl > s.set.Quarantine:
		s.bad = invalid("idempotency: lock TTL %v (WithLockTTL) is longer than the Redlock's restart quarantine, %v; give WithRestartQuarantine at least the lock TTL", s.cfg.ttl, s.set.Quarantine)
	}
	s.look = lookupScript.Unique(node.NewToken())
	return s
}

type fenceKey struct{}

// FencingToken returns the fencing number of the lock the work of Do holds,
// read from the ctx Do gives it (0 for any other ctx): strictly increasing
// across successive holders of any lock of the node set. Pass it to the
// resource the work changes, which should refuse a number smaller than one
// it has seen (docs/design.md, "Idempotency"). 0 for a nil ctx.
func FencingToken(ctx context.Context) uint64 {
	if ctx == nil {
		return 0
	}
	n, _ := ctx.Value(fenceKey{}).(uint64)
	return n
}

// Do returns the response remembered for key, replayed true, if a call with
// key and the same request completed within the retention on any Store over
// these nodes; otherwise it runs fn once under the key's lock and records its
// response on a majority (sent again while ctx lasts and the lock is valid)
// before returning it (docs/design.md, "Idempotency"). Once fn has run, the
// first send of its record (or, after fn's error, of the key's release) is
// not cut short by ctx (a record never sent would let a retry run fn
// again): Do can return up to one per-node timeout after ctx ends, with
// that send's outcome (ErrNotRecorded, with fn's response, if it failed). Only request's SHA-256
// is kept. fn's ctx is cancelled (cause mutex.ErrLost) if the lock is lost and
// carries [FencingToken]; if fn panics, the key is freed. Errors:
// ErrInProgress; ErrKeyReused; fn's error (nothing recorded, the key free);
// ErrNotRecorded, with fn's response; mutex.ErrNodesUnavailable, or
// mutex.ErrNotObtained alone when this process was too slow (fn not run);
// ctx's error if ctx ended before fn ran; mutex.ErrInvalid (nothing sent) for
// a bad key or option, or a nil fn, ctx or Store; mutex.ErrClosed after Close.
func (s *Store) Do(ctx context.Context, key string, request []byte, fn func(ctx context.Context) ([]byte, error)) (resp []byte, replayed bool, err error) {
	if err := s.unusable(); err != nil {
		return nil, false, err
	}
	return s.do(ctx, key, request, fn, s.cfg.maxResp)
}

// do is Do, recording responses of at most limit bytes.
func (s *Store) do(ctx context.Context, key string, request []byte, fn func(ctx context.Context) ([]byte, error), limit int) (resp []byte, replayed bool, err error) {
	if err := s.usable(ctx, key, fn); err != nil {
		return nil, false, err
	}
	fp := sha256.Sum256(request)
	r := s.newRun(key, fp[:])
	if rec, err := r.lookup(ctx, beforeLock); err != nil || rec != nil {
		return r.replay(rec, err)
	}
	// The lock's acquire script refuses while the key's record exists: a
	// run that completed since the lookup is found now (errRecorded).
	m := newRecordedMutex(s.set, r.lock, kind, r.recKey, r.recorded,
		mutex.WithTTL(s.cfg.ttl), mutex.WithAutoExtend(), mutex.WithFencing())
	lock := m.TryLockContext
	if s.cfg.wait {
		lock = m.LockContext
	}
	switch err := lock(ctx); {
	case err == nil:
	case errors.Is(err, errRecorded):
		if rec, err := r.lookup(ctx, afterRefusal); err != nil || rec != nil {
			return r.replay(rec, err)
		}
		// The record's retention ended since the refusal: the key is free.
		return nil, false, fmt.Errorf("idempotency: key %q: %w: its record expired while this call looked it up; try again", key, ErrInProgress)
	case errors.Is(err, mutex.ErrNodesUnavailable) || errors.Is(err, mutex.ErrInvalid) || errors.Is(err, mutex.ErrClosed):
		return nil, false, err
	case !s.cfg.wait && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return nil, false, fmt.Errorf("idempotency: key %q: ctx ended before the lock was obtained; nothing run: %w", key, err)
	case errors.Is(err, mutex.ErrContended):
		return nil, false, fmt.Errorf("idempotency: key %q: %w (%w)", key, ErrInProgress, err)
	default: // this process's delays: no other call is known to run
		return nil, false, fmt.Errorf("idempotency: key %q: nothing run: %w", key, err)
	}
	select {
	case <-m.Lost(): // too late to start: another call may hold the key now
		_ = m.UnlockContext(context.WithoutCancel(ctx))
		return nil, false, fmt.Errorf("idempotency: key %q: %w: the lock was lost before the work could start; nothing run: %w", key, ErrInProgress, m.LostCause())
	default:
	}
	resp, err = r.work(ctx, m, fn)
	if err != nil {
		resp = nil
	} else if len(resp) > limit {
		err = fmt.Errorf("idempotency: key %q: %w: the response of %d bytes is over the limit of %d (WithMaxResponse); nothing recorded",
			key, ErrNotRecorded, len(resp), limit)
	}
	if err != nil {
		if uerr := m.UnlockContext(context.WithoutCancel(ctx)); uerr != nil && m.LostCause() == nil {
			err = errors.Join(err, uerr)
		}
		return resp, false, err
	}
	return resp, false, r.record(ctx, m, resp)
}

// work runs fn under m, as redlock's Do does: its ctx is cancelled when m
// is lost, and carries m's fencing number. If fn panics, m is released,
// nothing recorded, before the panic goes on.
func (r *run) work(ctx context.Context, m *mutex.Mutex, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	work, stop := timing.CancelOnLoss(context.WithValue(ctx, fenceKey{}, m.FencingToken()), m.Lost(), m.LostCause)
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			_ = m.UnlockContext(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	return fn(work)
}

// unusable returns why s cannot run anything (nil, zero, or made with a
// bad Redlock or option), matching mutex.ErrInvalid, or nil.
func (s *Store) unusable() error {
	switch {
	case s == nil:
		return invalid("idempotency: nil *Store; create Stores with idempotency.New")
	case s.bad != nil:
		return s.bad
	case s.set == nil:
		return invalid("idempotency: zero Store; create Stores with idempotency.New")
	}
	return nil
}

// usable refuses, sending nothing, a call of Do that cannot run.
func (s *Store) usable(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) error {
	if err := s.unusable(); err != nil {
		return err
	}
	switch {
	case ctx == nil:
		return invalid("idempotency: Do: nil context.Context; pass context.Background() or one with a deadline")
	case fn == nil:
		return invalid("idempotency: Do %q: nil fn; nothing run", key)
	}
	if err := s.checkKey(key); err != nil {
		return err
	}
	return s.set.ErrIfClosed("idempotency: Do %q: the node set was closed (Close); nothing sent", key)
}

// checkKey returns why key cannot be used, matching mutex.ErrInvalid, or nil.
func (s *Store) checkKey(key string) error {
	switch {
	case key == "":
		return invalid("idempotency: Do: empty key")
	case len(key) > MaxKeyLen:
		return invalid("idempotency: Do: key of %d bytes is longer than %d (MaxKeyLen)", len(key), MaxKeyLen)
	case len(s.set.Keys.Prefix)+len(s.cfg.prefix)+len(key) > mutex.MaxNameLen:
		return invalid("idempotency: Do: key with prefixes of %d bytes is longer than %d", len(s.set.Keys.Prefix)+len(s.cfg.prefix)+len(key), mutex.MaxNameLen)
	case s.set.Keys.Reserved(s.cfg.prefix + key):
		return invalid("idempotency: Do %q: the key ends like one the library keeps for its own bookkeeping (as \":quorumlock:idem\"); choose another", key)
	}
	return nil
}

// Option configures a Store. Invalid values are not clamped: every Do
// reports them, matching mutex.ErrInvalid.
type Option func(*config)

type config struct {
	retention time.Duration
	ttl       time.Duration
	prefix    string
	wait      bool
	maxResp   int
}

// WithRetention sets how long a completed key's response is remembered,
// from its completion, on each node (the record's PX); default 24h; at
// least 1ms. After it the key is free: a call with it runs the work again.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// WithLockTTL sets the TTL of the lock held while the work runs, default
// 8s, renewed until the work returns: a holder that dies mid-work keeps the
// key in progress for at most about this long. With the Redlock's restart
// quarantine on, it may not exceed the quarantine (mutex.ErrInvalid).
func WithLockTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithKeyPrefix sets what is put before each key in the names of its lock
// and record, after the Redlock's own key prefix; default "idempotency:".
// The names are plain concatenations: Stores with different prefixes share
// no key as long as neither prefix starts with the other ("a" and "ab" do:
// key "bc" of one is key "c" of the other), so end prefixes with a
// separator that none of them contains elsewhere, as ':' in "billing:".
func WithKeyPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithWait makes Do wait, until ctx ends, for a call with the same key that
// is in progress, then replay its response (or run the work itself if that
// call failed), instead of returning ErrInProgress at once.
func WithWait() Option { return func(c *config) { c.wait = true } }

// WithMaxResponse sets the largest response Do records, in bytes, default
// 1 MiB: a larger one fails with ErrNotRecorded after the work ran. At
// least 1: 0 or less is ErrInvalid. For Middleware it bounds the body, the
// status and the headers kept are recorded besides.
func WithMaxResponse(n int) Option { return func(c *config) { c.maxResp = n } }

func (c *config) check() error {
	switch {
	case c.retention < time.Millisecond:
		return invalid("idempotency: retention %v is under 1ms", c.retention)
	case c.ttl < mutex.MinLeaseTTL:
		return invalid("idempotency: lock TTL %v (WithLockTTL) is below %v, the smallest TTL of a lock renewed while the work runs (mutex.MinLeaseTTL)", c.ttl, mutex.MinLeaseTTL)
	case len(c.prefix) > 1024:
		return invalid("idempotency: key prefix of %d bytes is longer than 1024", len(c.prefix))
	case c.maxResp <= 0:
		return invalid("idempotency: max response %d bytes (WithMaxResponse) leaves no room to record one: every Do would run the work, then fail with ErrNotRecorded", c.maxResp)
	}
	return nil
}

// invalid reports bad input, matching mutex.ErrInvalid.
func invalid(format string, args ...any) error {
	return engine.NewError(fmt.Sprintf(format, args...), mutex.ErrInvalid)
}
