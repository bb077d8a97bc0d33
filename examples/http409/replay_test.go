package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/quorumlocktest"
)

// TestRetryOnAnotherServerIsReplayed charges a payment on one server and
// retries on another (its own clients of the same nodes): the retry gets the
// same receipt, replayed, and charges nothing; the same payment with another
// amount is refused with 422. The ledger remembers nothing: without the
// idempotency store, the retry would charge again (a double charge).
func TestRetryOnAnotherServerIsReplayed(t *testing.T) {
	for name, nodes := range map[string]func(t *testing.T) []string{
		"kit":   func(t *testing.T) []string { return quorumlocktest.Start(t, 5).URLs() },
		"redis": func(t *testing.T) []string { return strings.Split(urls(redistest.Start(t, 3)), ",") },
	} {
		t.Run(name, func(t *testing.T) {
			list := nodes(t)
			ledger := &Ledger{}
			one := startServer(t, newPayments(t, open(t, strings.Join(list, ",")), ledger))
			two := startServer(t, newPayments(t, open(t, strings.Join(list, ",")), ledger))
			a := one.post(t, "/payments/42/charge", `{"amount_cents": 1299}`)
			require.Equal(t, http.StatusOK, a.status, a.body)
			b := two.post(t, "/payments/42/charge", `{"amount_cents":1299}`)
			require.Equal(t, http.StatusOK, b.status, b.body)
			assert.Equal(t, "true", b.header.Get(idempotency.ReplayedHeader))
			assert.Equal(t, a.body, b.body)
			c := two.post(t, "/payments/42/charge", `{"amount_cents": 1300}`)
			require.Equal(t, http.StatusUnprocessableEntity, c.status, c.body)
			assert.Equal(t, 1, ledger.Charges())
			assert.Zero(t, ledger.DoubleCharges())
		})
	}
}
