package mutex

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
)

// handlePrefix starts every handle: the format's version.
const handlePrefix = "qlh1."

// maxHandleLen bounds what ResumeMutex decodes: a handle of the longest
// name fits well within it.
const maxHandleLen = 2 * MaxNameLen

// handle is what a handle carries, as JSON in base64url.
type handle struct {
	Set   string `json:"s"`   // engine.Set.Identity
	Name  string `json:"n"`   // the lock's name
	Token string `json:"t"`   // the acquisition's token
	Fence uint64 `json:"f"`   // its fencing number; 0 without fencing
	TTL   int64  `json:"ttl"` // the Mutex's TTL in ms
	Lag   int64  `json:"lag"` // engine.Hold.Lag in µs
	Drift int64  `json:"dr"`  // the Mutex's drift allowance in µs
	// Metadata is the Mutex's WithMetadata, nil without: the resumed
	// Mutex's scripts renew and delete the record beside the key.
	Metadata *string `json:"md,omitempty"`
}

// Handle returns what another process needs to take the held lock over with
// redlock.(*Redlock).ResumeMutex, as an opaque string (name, token, fencing
// token, TTL, node set); whoever has it can extend and release the lock. It
// sends nothing, and is useless once the lock ended. Both Mutexes then hold
// one acquisition: either's ExtendContext renews it; once either released it
// (UnlockContext, or its set's Close, which releases it too), the other
// learns it only at its next ExtendContext or renewal (ErrNotHeld; Lost and
// Done close) or its validity's end (docs/design.md, "Handles").
// Errors: ErrNotHeld when the Mutex holds nothing, released it (also by an
// UnlockContext that too few nodes confirmed: that release may land at any
// moment), found it lost or saw its validity end; ErrInvalid for a lock on several names (a Mutex's only);
// ErrClosed after the set's Close.
func (m *Mutex) Handle() (string, error) {
	if err := m.usable(context.Background()); err != nil {
		return "", err
	}
	if err := m.l.Set().ErrIfClosed("mutex: handle of %q: the node set was closed, which released the lock if this Mutex held it", m.name); err != nil {
		return "", err
	}
	if k := m.l.Kind(); k != engine.MutexKind && k != engine.MetaKind {
		return "", invalid("mutex: handle of %q: only a Mutex on one name has handles, not a %s", m.name, m.l.Kind().Name)
	}
	h := m.l.Current()
	if h == nil || !m.l.Set().Clock.Now().Before(h.Until()) || holdEnded(h) {
		return "", engine.NewError(fmt.Sprintf("mutex: handle of %q: this Mutex does not hold the lock", m.name), ErrNotHeld)
	}
	h.Shared() // never passed within this process from now on: another may hold it
	b, err := json.Marshal(handle{
		Set: m.l.Set().Identity(), Name: m.name, Token: h.Token(), Fence: h.Fence(),
		TTL: m.cfg.ttl.Milliseconds(), Lag: h.Lag().Microseconds(), Drift: m.l.Drift().Microseconds(), Metadata: m.cfg.metadata,
	})
	if err != nil { // not for these fields
		return "", err
	}
	return handlePrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// newResumed returns a Mutex holding the lock text (a Handle) names: the
// constructor behind redlock.(*Redlock).ResumeMutex (see internal/construct).
func newResumed(ctx context.Context, set *engine.Set, text string, opts ...Option) (*Mutex, error) {
	if ctx == nil {
		return nil, invalid("mutex: resume: nil context.Context; pass context.Background() or a request's ctx")
	}
	h, err := parseHandle(text)
	if err != nil {
		return nil, err
	}
	base := []Option{WithTTL(time.Duration(h.TTL) * time.Millisecond)}
	if h.Fence > 0 {
		base = append(base, WithFencing())
	}
	if h.Metadata != nil {
		base = append(base, WithMetadata(*h.Metadata))
	}
	m := build(set, target{name: h.Name}, append(base, opts...))
	switch {
	case m.err != nil:
		return nil, m.err
	case set.Identity() != h.Set:
		return nil, invalid("mutex: resume %q: the handle is of another node set or key prefix; nothing sent", h.Name)
	case m.cfg.ttl.Milliseconds() != h.TTL:
		// Its extensions would set the keys' expiry by another TTL, under
		// the original's validity.
		return nil, invalid("mutex: resume %q: WithTTL(%v) differs from the lock's TTL, %v: a resumed Mutex keeps the original's; nothing sent",
			h.Name, m.cfg.ttl, time.Duration(h.TTL)*time.Millisecond)
	case (m.cfg.metadata == nil) != (h.Metadata == nil) || h.Metadata != nil && *m.cfg.metadata != *h.Metadata:
		// Its renewals would put another record back where a node lost the key.
		return nil, invalid("mutex: resume %q: WithMetadata differs from the lock's: a resumed Mutex keeps the original's; nothing sent", h.Name)
	}
	if err := m.l.Resume(ctx, h.Token, h.Fence, time.Duration(h.Lag)*time.Microsecond, time.Duration(h.Drift)*time.Microsecond); err != nil {
		return nil, err
	}
	return m, nil
}

// parseHandle decodes a handle, refusing anything Handle does not make.
func parseHandle(text string) (handle, error) {
	var h handle
	body, ok := strings.CutPrefix(text, handlePrefix)
	if !ok || len(text) > maxHandleLen {
		return h, invalid("mutex: resume: not a handle of Mutex.Handle (it starts with %q and is at most %d bytes); nothing sent", handlePrefix, maxHandleLen)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		err = dec.Decode(&h)
		if err == nil && dec.More() {
			err = errTrailing
		}
	}
	switch {
	case err != nil:
		return h, invalid("mutex: resume: malformed handle (%v); nothing sent", err)
	case h.Set == "" || h.Name == "" || !tokenLike(h.Token) || h.TTL <= 0 || h.TTL > math.MaxInt64/int64(time.Millisecond) || h.Lag < 0 || h.Lag/1000 >= h.TTL || h.Drift < 0 || h.Drift/1000 >= h.TTL:
		return h, invalid("mutex: resume: malformed handle (a field is missing or out of range); nothing sent")
	}
	return h, nil
}

var errTrailing = invalid("data after the handle's fields")

// tokenLike reports whether s can be a token the engine drew (node.NewToken:
// base32 text).
func tokenLike(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// holdEnded reports whether h ended (its Done closed): released, even by a
// release too few nodes confirmed, or found lost, or lost by now: a look at
// its Lost declares it lost once its loss deadline passed with nothing
// renewing it.
func holdEnded(h *engine.Hold) bool {
	h.Lost()
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}
