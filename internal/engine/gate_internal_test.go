package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGateTakesTurnsPerKey(t *testing.T) {
	s := &Set{}
	first, _, err := s.BeginAttempt(t.Context(), "a", false)
	require.NoError(t, err)
	other, _, err := s.BeginAttempt(t.Context(), "b", false) // another key does not wait
	require.NoError(t, err)

	got := make(chan *Gate, 1)
	go func() {
		g, _, err := s.BeginAttempt(context.Background(), "a", false)
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	// The second attempt on "a" cannot have its turn while the first holds it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err = s.BeginAttempt(ctx, "a", false)
	require.ErrorIs(t, err, context.Canceled)
	select {
	case <-got:
		t.Fatal("two attempts on one key at once")
	default:
	}
	first.End(nil, false)
	second := <-got
	require.NotNil(t, second)
	second.End(nil, false)
	other.End(nil, false)

	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	require.Empty(t, s.gates, "gates of finished attempts are dropped")
}

// An optional attempt (a look to keep a place) never waits: while another
// attempt on the key is in progress, it gets no turn; on a free key, its turn.
func TestAnOptionalAttemptDoesNotWait(t *testing.T) {
	s := &Set{}
	first, _, err := s.BeginAttempt(t.Context(), "a", false)
	require.NoError(t, err)
	g, _, err := s.BeginAttempt(t.Context(), "a", true)
	require.NoError(t, err)
	require.Nil(t, g)
	first.End(nil, false)
	g, _, err = s.BeginAttempt(t.Context(), "a", true)
	require.NoError(t, err)
	require.NotNil(t, g, "a free key's turn")
	g.End(nil, false)
}

// A call that gets no turn learns the outcome of the latest attempt on the
// key decided meanwhile: what the nodes said last (review 19: Semaphore
// callers waiting for their turn through an outage reported ctx's error alone).
func TestACallWithoutATurnGetsTheLatestOutcome(t *testing.T) {
	s := &Set{}
	first, _, err := s.BeginAttempt(t.Context(), "a", false)
	require.NoError(t, err)
	outage := errors.New("3 of 5 nodes failed")
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		first.End(outage, true)
	}()
	next, _, err := s.BeginAttempt(t.Context(), "a", false) // its turn comes once first ends
	require.NoError(t, err)
	<-ended
	_, latest, _ := s.BeginAttempt(t.Context(), "a", true)
	require.ErrorIs(t, latest, outage, "an optional look")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, latest, err = s.BeginAttempt(ctx, "a", false)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, latest, outage, "ctx ended before its turn")
	next.End(nil, false) // undecided: the latest outcome stays
	g, _, err := s.BeginAttempt(ctx, "a", false)
	require.NoError(t, err, "a free turn is taken though ctx ended")
	g.End(nil, false)
}
