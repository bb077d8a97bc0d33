package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGateTakesTurnsPerKey(t *testing.T) {
	s := &Set{}
	first, err := s.BeginAttempt(t.Context(), "a")
	require.NoError(t, err)
	other, err := s.BeginAttempt(t.Context(), "b") // another key does not wait
	require.NoError(t, err)

	got := make(chan *Gate, 1)
	go func() {
		g, err := s.BeginAttempt(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	// The second attempt on "a" cannot have its turn while the first holds it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = s.BeginAttempt(ctx, "a")
	require.ErrorIs(t, err, context.Canceled)
	select {
	case <-got:
		t.Fatal("two attempts on one key at once")
	default:
	}
	first.End()
	second := <-got
	require.NotNil(t, second)
	second.End()
	other.End()

	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	require.Empty(t, s.gates, "gates of finished attempts are dropped")
}
