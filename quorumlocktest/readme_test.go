package quorumlocktest_test

// The README's "Testing your code" shows this file.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorumlocktest"
	"github.com/quorumlock/quorumlock/redlock"
)

// chargeHandler charges a payment under its lock: 409 while another request
// holds it, 503 when too few lock nodes answer, or not before the deadline.
func chargeHandler(rs *redlock.Redlock) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m := rs.NewMutex("payment:" + r.PathValue("id"))
		err := m.TryLockContext(r.Context())
		switch {
		case errors.Is(err, mutex.ErrContended):
			http.Error(w, "payment already in progress", http.StatusConflict)
			return
		case err != nil: // mutex.ErrNodesUnavailable, or ctx ended first
			http.Error(w, "lock service unavailable, try again", http.StatusServiceUnavailable)
			return
		}
		defer func() { _ = m.UnlockContext(context.WithoutCancel(r.Context())) }()
		fmt.Fprintln(w, "charged")
	}
}

func TestChargeHandler(t *testing.T) {
	nodes := quorumlocktest.Start(t, 5)
	rs := nodes.Redlock()
	mux := http.NewServeMux()
	mux.Handle("POST /payments/{id}/charge", chargeHandler(rs))
	charge := func() int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/payments/42/charge", nil))
		return rec.Code
	}

	// 409: another request holds the payment.
	other := rs.NewMutex("payment:42")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, other.LockContext(ctx))
	require.Equal(t, http.StatusConflict, charge())
	require.NoError(t, other.UnlockContext(ctx))
	require.Equal(t, http.StatusOK, charge())

	// 503: a majority hangs, and the request's deadline comes before any
	// node is judged failed: nobody said the payment is busy.
	for i := range 3 {
		nodes.Hang(i)
	}
	hurried := httptest.NewRecorder()
	req, stop := context.WithTimeout(t.Context(), 20*time.Millisecond)
	mux.ServeHTTP(hurried, httptest.NewRequestWithContext(req, http.MethodPost, "/payments/7/charge", nil))
	stop()
	require.Equal(t, http.StatusServiceUnavailable, hurried.Code)
	for i := range 3 {
		nodes.Unhang(i)
	}

	// 503: a majority of the lock nodes is down.
	for i := range 3 {
		nodes.Stop(i)
	}
	require.Equal(t, http.StatusServiceUnavailable, charge())
}
