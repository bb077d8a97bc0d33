package idempotency

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/construct"
	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/mutex"
)

// The scripts, from lua/; each file documents its keys, arguments and reply.
var (
	//go:embed lua/lookup.lua
	lookupSrc string
	//go:embed lua/acquire.lua
	acquireSrc string
	//go:embed lua/release.lua
	releaseSrc string

	lookupScript = node.NewScript("idempotency-lookup", lookupSrc)

	// kind is the lock of a key: a Mutex's, refused while the key's record
	// exists on any node, whose release can write the record.
	kind = &engine.Kind{Name: "idempotency", Renew: node.RenewScript, OneRecordRefuses: true,
		Acquire: node.AroundAcquire("idempotency-acquire", acquireSrc),
		Release: node.AroundRelease("idempotency-release", releaseSrc)}

	newRecordedMutex = construct.RecordedMutex.(func(*engine.Set, string, *engine.Kind, string, func(string) error, ...mutex.Option) *mutex.Mutex)
	unlockWith       = construct.UnlockWith.(func(*mutex.Mutex, context.Context, []any) error)
)

// errRecorded is the error of a lock refused because the key's record
// exists on the nodes: the key completed.
var errRecorded = errors.New("idempotency: the key completed (its record is on the nodes)")

// recorded is the kind's engine.Spec.Conflict.
func (r *run) recorded(string) error {
	return engine.NewError(fmt.Sprintf("idempotency: key %q: lock not obtained: the key completed (its record is on the nodes)", r.key), mutex.ErrNotObtained, errRecorded)
}

// run is one call of Do: its key's names, and its request's fingerprint.
type run struct {
	s       *Store
	key     string
	fp      []byte
	lock    string // the lock's name
	lockKey string // its Redis key: the node set's key prefix, then lock
	recKey  string // the record's Redis key
}

func (s *Store) newRun(key string, fp []byte) *run {
	r := &run{s: s, key: key, fp: fp, lock: s.cfg.prefix + key}
	r.lockKey = s.set.Keys.Prefix + r.lock
	r.recKey = s.set.Keys.Record(r.lockKey) // in the lock key's slot
	return r
}

// record is a completed run as a node keeps it.
type record struct {
	fp    string
	resp  string
	fence uint64
}

// lookup reads the key's record on every node. It returns the record a
// node holds (the latest run's, by fencing number, if they differ, of the
// nodes read); nil when a majority of trusted nodes hold none; and an error
// matching mutex.ErrNodesUnavailable when fewer did and none holds one. It
// returns once a majority of trusted nodes answered, not waiting for the rest.
//
// With the restart quarantine on, a node is trusted only if this client
// has judged it out of quarantine, as its acquisitions judge (the marker,
// NOSCRIPT to this Store's own copy of the script): a node it has not
// judged yet (first met, or showing a restart since) is not, except
// beforeLock, where the lock's acquisition, which judges it, comes next
// (docs/design.md, "Idempotency").
func (r *run) lookup(ctx context.Context, when stage) (*record, error) {
	set := r.s.set
	keys := []string{r.recKey}
	if set.Quarantine > 0 {
		keys = append(keys, set.Keys.Marker(r.lockKey))
	}
	read := func(ctx context.Context, n *node.Node) (*record, error) {
		rep := n.Read(ctx, set.Timeout(r.s.cfg.ttl), r.s.look, keys, nil)
		if rep.Err != nil {
			return nil, rep.Err
		}
		rec, marker, err := parseLookup(rep.Reply)
		if err != nil || set.Quarantine == 0 {
			return rec, err
		}
		switch q, ok := n.QuarantineKnown(node.Signs{Key: r.lockKey, Marker: marker, NoScript: rep.NoScript}); {
		case !ok:
			return rec, errUnjudged
		case q.Until.After(set.Clock.Now()):
			return rec, fmt.Errorf("%w: %s; it counts again from %v", mutex.ErrQuarantined, q.Why, q.Until.Format(time.RFC3339))
		}
		return rec, nil
	}
	var found *record
	trusted, unjudged := 0, 0
	majority := func() bool { return trusted >= set.Need() || (when == beforeLock && trusted+unjudged >= set.Need()) }
	// enough judges the answers in: a majority trusted (or, beforeLock, not
	// yet judged) settles it; the latest record among them is the one.
	enough := func(recs []*record, errs []error, done []bool) bool {
		found, trusted, unjudged = nil, 0, 0
		for i, rec := range recs {
			if rec != nil && (found == nil || rec.fence > found.fence) {
				found = rec
			}
			switch {
			case !done[i]:
			case errs[i] == nil:
				trusted++
			case errors.Is(errs[i], errUnjudged):
				unjudged++
			}
		}
		if when == afterRefusal { // a node refused for the record: until it is found, or every node answered
			return found != nil
		}
		return majority()
	}
	_, errs := node.Each(ctx, set.Nodes, nil, read, set.Errors.NodeFailure, enough)
	failed := func(err error) bool {
		return err != nil && !errors.Is(err, errUnjudged) && !errors.Is(err, mutex.ErrQuarantined)
	}
	msg := fmt.Sprintf("%d of %d nodes answered and can be trusted, fewer than a majority: whether it completed is unknown; nothing run", trusted, len(set.Nodes))
	switch {
	case found != nil:
		return found, nil
	case when == afterRefusal && slices.ContainsFunc(errs, failed): // the node that refused may be one that failed
		msg = "a node refused the lock for the key's record, and no node that answered holds one: whether it completed is unknown; nothing run"
	case majority():
		return nil, nil
	}
	return nil, set.UnavailableError(ctx, fmt.Sprintf("idempotency: key %q", r.key), msg, errs)
}

// stage is when a lookup is made: before the key's lock, or after the
// lock was refused because nodes hold the record.
type stage uint8

const (
	beforeLock   stage = iota
	afterRefusal       // the lock was refused for the record
)

// errUnjudged is the failure of a node whose restart-quarantine state this
// client has not judged yet.
var errUnjudged = errors.New("idempotency: not yet judged for the restart quarantine (first met, or showing signs of a restart)")

// parseLookup reads lookup.lua's reply: the record, nil if none, and the marker.
func parseLookup(v any) (*record, string, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return nil, "", fmt.Errorf("idempotency: malformed reply to the lookup script: %v", v)
	}
	found, ok1 := a[0].(int64)
	fp, ok2 := a[1].(string)
	resp, ok3 := a[2].(string)
	fence, ok4 := a[3].(string)
	marker, ok5 := a[4].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, "", fmt.Errorf("idempotency: malformed reply to the lookup script: %v", v)
	}
	if found == 0 {
		return nil, marker, nil
	}
	n, err := strconv.ParseUint(fence, 10, 64)
	if err != nil {
		return nil, "", fmt.Errorf("idempotency: malformed record: fencing number %q", fence)
	}
	return &record{fp: fp, resp: resp, fence: n}, marker, nil
}

// replay is Do's answer from a lookup's outcome, when it found a record or failed.
func (r *run) replay(rec *record, err error) ([]byte, bool, error) {
	switch {
	case err != nil:
		return nil, false, err
	case !bytes.Equal([]byte(rec.fp), r.fp):
		return nil, false, fmt.Errorf("idempotency: key %q: %w; nothing run", r.key, ErrKeyReused)
	}
	return []byte(rec.resp), true, nil
}

// record releases m's lock, writing the response, with the release, on
// every node where the lock key holds m's token, or nothing and no record
// (idempotency/lua/release.lua); it fails with
// ErrNotRecorded unless a majority confirmed the release (and so wrote it).
// While too few nodes answered, it is sent again (50ms on, doubling to 1s)
// while ctx lasts and m is valid: the failed nodes still hold m's keys.
func (r *run) record(ctx context.Context, m *mutex.Mutex, resp []byte) error {
	args, c := []any{r.fp, resp, strconv.FormatUint(m.FencingToken(), 10), r.s.cfg.retention.Milliseconds()}, r.s.set.Clock
	err := unlockWith(m, context.WithoutCancel(ctx), args)
	for wait := 50 * time.Millisecond; errors.Is(err, mutex.ErrNodesUnavailable) && m.LostCause() == nil && ctx.Err() == nil &&
		m.Until().Sub(c.Now()) > wait; wait = min(2*wait, time.Second) {
		next, stop := timing.Timer(c, wait)
		select {
		case <-ctx.Done():
		case <-next:
			err = unlockWith(m, ctx, args) // ctx ending cuts it short; it goes on in the background
		}
		stop()
	}
	if err == nil {
		return nil
	}
	return &notRecorded{lost: errors.Is(err, mutex.ErrNotHeld) || m.LostCause() != nil,
		err: fmt.Errorf("idempotency: key %q: %w: a majority did not confirm the release that writes it; a retry may run the work again: %w", r.key, ErrNotRecorded, err)}
}

// notRecorded is record's error: ErrNotRecorded, also ErrLost when the
// lock had ended on some node, and the release's error.
type notRecorded struct {
	lost bool
	err  error
}

func (e *notRecorded) Error() string { return e.err.Error() }
func (e *notRecorded) Unwrap() error { return e.err }
func (e *notRecorded) Is(target error) bool {
	return target == ErrNotRecorded || (e.lost && target == mutex.ErrLost)
}
