package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/redlock"
)

// chargeCard stands for a call to a payment API, which should refuse a
// fencing number lower than one it has seen.
func chargeCard(_ context.Context, fence uint64) ([]byte, error) {
	return fmt.Appendf(nil, `{"charged":true,"fence":%d}`, fence), nil
}

func ExampleStore_Do() {
	ctx := context.Background()
	rs, err := redlock.NewFromURLs(ctx, []string{"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"})
	if err != nil {
		panic(err)
	}
	defer rs.Close()
	store := idempotency.New(rs, idempotency.WithRetention(24*time.Hour))

	key, request := "order-42", []byte(`{"amount":4200}`)
	resp, replayed, err := store.Do(ctx, key, request, func(ctx context.Context) ([]byte, error) {
		return chargeCard(ctx, idempotency.FencingToken(ctx)) // at most once per key while retained
	})
	switch {
	case errors.Is(err, idempotency.ErrInProgress):
		// Another call with this key runs now: retry later.
	case errors.Is(err, idempotency.ErrKeyReused):
		// The key completed with another request: a client bug.
	case err != nil:
		// The work failed (nothing remembered), or see the other errors of Do.
	default:
		fmt.Println(string(resp), replayed) // replayed: the first call's response
	}
}

func ExampleMiddleware() {
	rs, err := redlock.NewFromURLs(context.Background(), []string{"redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"})
	if err != nil {
		panic(err)
	}
	defer rs.Close()
	charges := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, _ := chargeCard(r.Context(), idempotency.FencingToken(r.Context()))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	})
	// Requests with an Idempotency-Key run once per key; a retry gets the
	// same response with Idempotent-Replayed: true, a concurrent duplicate 409.
	http.Handle("POST /charges", idempotency.Middleware(idempotency.New(rs))(charges))
}
