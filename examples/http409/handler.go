package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Payments serves POST /payments/{id}/charge. Each charge runs under the lock
// "payment:<id>", taken with a single attempt: a request for a payment that
// another request (on this server or any other using the same nodes) is
// processing gets 409 Conflict at once instead of waiting for it.
//
// Its fields must be set before the first request; it is then safe for
// concurrent use.
type Payments struct {
	Locks  *redlock.Redlock
	Ledger *Ledger
	// TTL is the lock's time to live: the longest a crashed server can keep
	// a payment locked. A charge must end within the lock's validity (a
	// little less than TTL) and is cancelled if it does not.
	TTL time.Duration
	// RetryAfter is the wait suggested to clients refused with 409 or 503,
	// in the Retry-After header (whole seconds, rounded up) and the JSON body.
	RetryAfter time.Duration
	// Log receives what the client is not told: lost locks, node errors.
	Log *log.Logger
}

// Routes returns the handler for the Payments API.
func (p *Payments) Routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments/{id}/charge", p.charge)
	return mux
}

// chargeRequest is the body of POST /payments/{id}/charge.
type chargeRequest struct {
	AmountCents int64 `json:"amount_cents"`
}

// apiError is the body of every error reply.
type apiError struct {
	Error        string `json:"error"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (p *Payments) charge(w http.ResponseWriter, r *http.Request) {
	// Check the request before taking any lock.
	id := r.PathValue("id")
	if !validID.MatchString(id) {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid payment id %q: want 1 to 64 letters, digits, '-' or '_'", id)})
		return
	}
	var req chargeRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid body: want {\"amount_cents\": <positive integer>}: " + err.Error()})
		return
	}
	if req.AmountCents <= 0 {
		writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("invalid amount_cents %d: must be positive", req.AmountCents)})
		return
	}

	// One attempt, no waiting: the answer to a duplicate is 409, now.
	// Simultaneous requests to this server take turns at the nodes, so
	// exactly one of them gets the lock. Requests to different servers at
	// the same instant can split the nodes so that none gets a majority:
	// then all get 409, which is still what 409 + Retry-After says (the
	// payment is being worked on, try again shortly), and the retry goes
	// through.
	m := p.Locks.NewMutex("payment:"+id, mutex.WithTTL(p.TTL))
	err := m.TryLockContext(r.Context())
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		return // the client has gone; the failed attempt left no key behind
	case errors.Is(err, mutex.ErrNodesUnavailable):
		// Checked before ErrNotObtained, which every failed attempt matches.
		// Not another owner: fewer than a majority of the lock nodes
		// answered. Say so, rather than claim the payment is busy. (With a
		// majority up, a node saying another request holds the payment makes
		// it plain ErrNotObtained, a 409, even if some nodes failed.)
		p.Log.Printf("payment %s: %v", id, err)
		p.retryLater(w, http.StatusServiceUnavailable, "the lock service is unavailable (too few lock nodes answered); try again")
		return
	case errors.Is(err, mutex.ErrInvalid):
		p.Log.Printf("payment %s: lock misconfigured: %v", id, err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "internal error"})
		return
	case errors.Is(err, mutex.ErrNotObtained):
		// On its own, ErrNotObtained means other owners hold the lock.
		p.retryLater(w, http.StatusConflict, fmt.Sprintf("payment %s is already being processed", id))
		return
	default:
		p.Log.Printf("payment %s: %v", id, err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "internal error"})
		return
	}
	receipt, err := p.chargeLocked(r.Context(), m, id, req.AmountCents)
	// The lock is released by now, so a client that retries as soon as it
	// has this answer is not refused.
	if err != nil {
		p.Log.Printf("payment %s: charge failed: %v", id, err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: fmt.Sprintf("payment %s could not be charged; nothing was charged", id)})
		return
	}
	writeJSON(w, http.StatusOK, receipt)
}

// chargeLocked charges the payment under m, which it holds, and releases m
// before returning, whatever happens.
func (p *Payments) chargeLocked(ctx context.Context, m *mutex.Mutex, id string, amountCents int64) (Receipt, error) {
	defer func() {
		// Always release, even when the client has gone and ctx is
		// cancelled: otherwise the payment stays locked until the TTL ends.
		err := m.UnlockContext(context.WithoutCancel(ctx))
		switch {
		case errors.Is(err, mutex.ErrNotHeld):
			p.Log.Printf("payment %s: lock lost during the charge: it may have overlapped another charge; reconcile payment %s", id, id)
		case err != nil:
			p.Log.Printf("payment %s: releasing the lock: %v (its keys expire with the TTL)", id, err)
		}
	}()
	// The charge must end while the lock is still ours.
	chargeCtx, cancel := context.WithDeadline(ctx, m.Until())
	defer cancel()
	return p.Ledger.Charge(chargeCtx, id, amountCents)
}

// retryLater answers status with msg and when to try again.
func (p *Payments) retryLater(w http.ResponseWriter, status int, msg string) {
	secs := int64((p.RetryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	writeJSON(w, status, apiError{Error: msg, RetryAfterMS: p.RetryAfter.Milliseconds()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
