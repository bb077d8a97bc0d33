package idempotency

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/mutex"
)

// The scripts, from lua/; each file documents its keys, arguments and reply.
var (
	//go:embed lua/lookup.lua
	lookupSrc string
	//go:embed lua/record.lua
	recordSrc string

	lookupScript = node.NewScript("idempotency-lookup", lookupSrc)
	recordScript = node.NewScript("idempotency-record", recordSrc)
)

// recordInfix follows a key's lock key in the name of its record.
const recordInfix = ":quorumlock:idem"

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
	r.lockKey = s.set.KeyPrefix + r.lock
	r.recKey = r.lockKey + recordInfix
	if s.set.Sharded() && !hasHashTag(r.lockKey) {
		r.recKey = "{" + r.lockKey + "}" + recordInfix // the lock key's slot
	}
	return r
}

// hasHashTag reports whether Redis Cluster hashes only part of key.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	return open >= 0 && strings.IndexByte(key[open+1:], '}') > 0
}

// record is a completed run as a node keeps it.
type record struct {
	fp    string
	resp  string
	fence uint64
}

// lookup reads the key's record on every node. It returns the record any
// node holds (the latest run's, by fencing number, if they differ); nil
// when at least a majority of trusted nodes hold none; and an error
// matching mutex.ErrNodesUnavailable when fewer did and none holds one.
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
		keys = append(keys, set.MarkerKeyOf(r.lockKey))
	}
	replies := set.Each(ctx, set.Timeout(r.s.cfg.ttl), r.s.look, keys, nil)
	var found *record
	errs := make([]error, len(replies))
	trusted, unjudged := 0, 0
	for i, rep := range replies {
		n := set.Nodes[i]
		errs[i] = rep.Err
		if rep.Err != nil {
			continue
		}
		rec, marker, err := parseLookup(rep.Value)
		if err != nil {
			errs[i] = set.Errors.Node(n.Addr(), err)
			continue
		}
		if rec != nil && (found == nil || rec.fence > found.fence) {
			found = rec
		}
		if set.Quarantine == 0 {
			trusted++
			continue
		}
		switch until, ok := n.QuarantineKnown(node.Signs{Key: r.lockKey, Marker: marker, NoScript: rep.NoScript}); {
		case !ok:
			unjudged++
			errs[i] = set.Errors.Node(n.Addr(), errUnjudged)
		case until.After(set.Clock.Now()):
			errs[i] = set.Errors.Node(n.Addr(), fmt.Errorf("%w until %v", mutex.ErrQuarantined, until.Format(time.RFC3339Nano)))
		default:
			trusted++
		}
	}
	if found != nil || trusted >= set.Need() || (when == beforeLock && trusted+unjudged >= set.Need()) {
		return found, nil
	}
	msg := fmt.Sprintf("idempotency: key %q: %d of %d nodes answered and can be trusted, fewer than a majority: whether it completed is unknown; nothing run", r.key, trusted, len(replies))
	return nil, set.UnavailableError(ctx, msg, errs)
}

// stage is when a lookup is made: before the key's lock, or under it.
type stage uint8

const (
	beforeLock stage = iota
	underLock
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

// record writes the response on every node where m's lock key still holds
// its token, and fails with ErrNotRecorded unless a majority wrote it.
func (r *run) record(ctx context.Context, m *mutex.Mutex, resp []byte) error {
	cfg := &r.s.cfg
	if len(resp) > cfg.maxResp {
		return fmt.Errorf("idempotency: key %q: %w: the response of %d bytes is over the limit of %d (WithMaxResponse); nothing recorded",
			r.key, ErrNotRecorded, len(resp), cfg.maxResp)
	}
	set := r.s.set
	ctx = context.WithoutCancel(ctx) // the work ran: try to remember it
	replies := set.Each(ctx, set.Timeout(cfg.ttl), r.s.save, []string{r.lockKey, r.recKey},
		[]any{m.Value(), r.fp, resp, strconv.FormatUint(m.FencingToken(), 10), cfg.retention.Milliseconds()})
	written, refused := 0, 0
	errs := make([]error, len(replies))
	for i, rep := range replies {
		errs[i] = rep.Err
		switch v, _ := rep.Value.(int64); {
		case rep.Err != nil:
		case v == 1:
			written++
		case v == 0:
			refused++
		default:
			errs[i] = set.Errors.Node(set.Nodes[i].Addr(), fmt.Errorf("idempotency: malformed reply to the record script: %v", rep.Value))
		}
	}
	if written >= set.Need() {
		return nil
	}
	msg := fmt.Sprintf("idempotency: key %q: %v: written on %d of %d nodes, refused by %d where the lock had ended; a retry may run the work again",
		r.key, ErrNotRecorded, written, len(replies), refused)
	e := &notRecorded{lost: refused > 0, err: errors.New(msg)}
	if written+refused < set.Need() {
		e.err = set.UnavailableError(ctx, msg, errs)
	}
	return e
}

// notRecorded is record's error: ErrNotRecorded, also ErrLost when the
// lock had ended on some node, and the nodes' failures.
type notRecorded struct {
	lost bool
	err  error
}

func (e *notRecorded) Error() string { return e.err.Error() }
func (e *notRecorded) Unwrap() error { return e.err }
func (e *notRecorded) Is(target error) bool {
	return target == ErrNotRecorded || (e.lost && target == mutex.ErrLost)
}
