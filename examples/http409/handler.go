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

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Payments serves POST /payments/{id}/charge. Each payment is charged once:
// the first request runs the charge under the lock "payment:<id>", and its
// receipt is remembered on a majority of the lock nodes (an
// idempotency.Store), so a retry after it, on this server or any other
// using the same nodes, gets the same receipt with Idempotent-Replayed: true
// and charges nothing. A request while the charge runs gets 409 Conflict at
// once instead of waiting for it.
//
// Its fields must be set before Routes is called; it is then safe for
// concurrent use.
type Payments struct {
	Locks  *redlock.Redlock
	Ledger Charger // the payment provider
	// TTL is the lock's time to live, renewed while the charge runs: the
	// longest a crashed server can keep a payment in progress. A charge
	// whose lock is lost is cancelled.
	TTL time.Duration
	// RetryAfter is the wait suggested to clients refused with 409 or 503,
	// in the Retry-After header (whole seconds, rounded up) and the JSON body.
	RetryAfter time.Duration
	// Log receives what the client is not told: node errors, unrecorded receipts.
	Log *log.Logger

	store *idempotency.Store
}

// Routes returns the handler for the Payments API.
func (p *Payments) Routes() http.Handler {
	// Keys are "payment:<id>", under the node set's prefix, as the lock's.
	p.store = idempotency.New(p.Locks, idempotency.WithLockTTL(p.TTL), idempotency.WithKeyPrefix(""))
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

	// The request, as the store compares it: the same payment charged with
	// another amount is refused, not replayed.
	request := strconv.AppendInt(nil, req.AmountCents, 10)
	// One attempt at the lock, no waiting: the answer to a duplicate is 409,
	// now. Simultaneous requests to this server take turns at the nodes, so
	// exactly one of them gets the lock. Requests to different servers at
	// the same instant can split the nodes so that none gets a majority:
	// then all get 409, which is still what 409 + Retry-After says (the
	// payment is being worked on, try again shortly), and the retry goes
	// through.
	resp, replayed, err := p.store.Do(r.Context(), "payment:"+id, request, func(ctx context.Context) ([]byte, error) {
		receipt, err := p.Ledger.Charge(ctx, id, req.AmountCents)
		if err != nil {
			return nil, err
		}
		return json.Marshal(receipt)
	})
	switch {
	case err == nil:
		if replayed {
			w.Header().Set(idempotency.ReplayedHeader, "true")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(resp, '\n'))
	case errors.Is(err, idempotency.ErrNotRecorded):
		// Charged, but the receipt is not on a majority of the lock nodes:
		// a retry might charge again. Tell the client it was charged.
		p.Log.Printf("payment %s: %v; reconcile payment %s", id, err, id)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(resp, '\n'))
	case r.Context().Err() != nil:
		return // the client has gone; nothing was charged unless its receipt was recorded
	case errors.Is(err, mutex.ErrNodesUnavailable):
		// Not another request: fewer than a majority of the lock nodes
		// answered. Say so, rather than claim the payment is busy. (With a
		// majority up, a node saying another request holds the payment makes
		// it ErrInProgress, a 409, even if some nodes failed.)
		p.Log.Printf("payment %s: %v", id, err)
		p.retryLater(w, http.StatusServiceUnavailable, "the lock service is unavailable (too few lock nodes answered); try again")
	case errors.Is(err, idempotency.ErrInProgress):
		p.retryLater(w, http.StatusConflict, fmt.Sprintf("payment %s is already being processed", id))
	case errors.Is(err, idempotency.ErrKeyReused):
		writeJSON(w, http.StatusUnprocessableEntity, apiError{Error: fmt.Sprintf("payment %s was charged with another amount", id)})
	default:
		p.Log.Printf("payment %s: charge failed: %v", id, err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: fmt.Sprintf("payment %s could not be charged; nothing was charged", id)})
	}
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
