package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGateTakesTurnsPerKey(t *testing.T) {
	s := &Set{}
	first, err := s.BeginAttempt(t.Context(), "a", false)
	require.NoError(t, err)
	other, err := s.BeginAttempt(t.Context(), "b", false) // another key does not wait
	require.NoError(t, err)

	got := make(chan *Gate, 1)
	go func() {
		g, err := s.BeginAttempt(context.Background(), "a", false)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	// The second attempt on "a" cannot have its turn while the first holds it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = s.BeginAttempt(ctx, "a", false)
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

// An optional attempt (a look to keep a place) never waits: while another
// attempt on the key is in progress, it gets no turn; on a free key, its turn.
func TestAnOptionalAttemptDoesNotWait(t *testing.T) {
	s := &Set{}
	first, err := s.BeginAttempt(t.Context(), "a", false)
	require.NoError(t, err)
	g, err := s.BeginAttempt(t.Context(), "a", true)
	require.NoError(t, err)
	require.Nil(t, g)
	first.End()
	g, err = s.BeginAttempt(t.Context(), "a", true)
	require.NoError(t, err)
	require.NotNil(t, g, "a free key's turn")
	g.End()
}
