package round_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// asked is a round whose voters answer from goroutines of their own.
type asked[T any] struct {
	*round.Round[T]
	wg sync.WaitGroup
}

// ask starts ask(i) for every voter 0 <= i < n of a new round without
// timeouts, each in its own goroutine, which records what it returns.
func ask[T any](n int, ask func(node int) (quorum.Vote, T, error)) *asked[T] {
	r := &asked[T]{Round: round.New[T](n, nil, 0, nil)}
	for i := range n {
		r.wg.Go(func() {
			v, val, err := ask(i)
			r.Answer(i, v, val, err)
		})
	}
	return r
}

// Wait blocks until every voter's goroutine has returned.
func (r *asked[T]) Wait() { r.wg.Wait() }

// voters answers on demand: voter i blocks until the test releases it with
// answer, so the order of arrival is under the test's control.
type voters struct {
	ch []chan answer
}

type answer struct {
	vote quorum.Vote
	err  error
}

func newVoters(n int) *voters {
	v := &voters{ch: make([]chan answer, n)}
	for i := range v.ch {
		v.ch[i] = make(chan answer, 1)
	}
	return v
}

func (v *voters) ask(i int) (quorum.Vote, int, error) {
	a := <-v.ch[i]
	return a.vote, i, a.err
}

func (v *voters) answer(i int, vote quorum.Vote) { v.ch[i] <- answer{vote: vote} }
func (v *voters) fail(i int, err error)          { v.ch[i] <- answer{vote: quorum.Failed, err: err} }

// finish answers every voter that has not been answered, so no goroutine is
// left behind.
func (v *voters) finish(r *asked[int]) {
	for i := range v.ch {
		select {
		case v.ch[i] <- answer{vote: quorum.No}:
		default:
		}
	}
	r.Wait()
}

type counts struct{ yes, pending int }

// Decide returns once the answers in settle the round. The voters left out
// of answers never answer before the decision, and no deadline is given, so
// only an early decision lets Decide return.
func TestDecideOnTheAnswersIn(t *testing.T) {
	boom := errors.New("boom")
	yes, no, failed := answer{vote: quorum.Yes}, answer{vote: quorum.No}, answer{vote: quorum.Failed, err: boom}
	tests := []struct {
		name    string
		n       int
		answers map[int]answer
		// what the tally says, and the errors of the failed voters in order
		won, lost, unavailable bool
		failed                 []error
		// the counts at the decision, where the order in which the answers
		// arrive cannot change them (a loss may be decided before a Yes is in)
		counts *counts
	}{
		{name: "wins without waiting for stragglers", n: 5, answers: map[int]answer{0: yes, 3: yes, 4: yes},
			won: true, counts: &counts{yes: 3, pending: 2}},
		{name: "unavailable when failures prevent a majority", n: 5, answers: map[int]answer{0: yes, 1: failed, 2: failed, 3: failed},
			lost: true, unavailable: true, failed: []error{boom, boom, boom}},
		{name: "an even split is not a majority", n: 4, answers: map[int]answer{0: yes, 1: yes, 2: no, 3: no},
			lost: true}, // 2 of 4 is not a majority
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVoters(tt.n)
			r := ask(tt.n, v.ask)
			t.Cleanup(func() { v.finish(r) })
			for i, a := range tt.answers {
				v.ch[i] <- a
			}
			require.NoError(t, r.Decide(t.Context(), nil))
			tally := r.Tally()
			assert.Equal(t, tt.won, tally.Won(), "won")
			assert.Equal(t, tt.lost, tally.Lost(), "lost")
			assert.Equal(t, tt.unavailable, tally.Unavailable(), "unavailable")
			if tt.counts != nil {
				assert.Equal(t, tt.counts.yes, tally.Yes, "yes")
				assert.Equal(t, tt.counts.pending, tally.Pending(), "pending")
			}
			var failed []error
			for _, rep := range r.Replies() {
				if rep.Vote == quorum.Failed {
					failed = append(failed, rep.Err)
				}
			}
			assert.Equal(t, tt.failed, failed, "the failed voters' errors")
			for i := range tt.n {
				if _, ok := tt.answers[i]; !ok {
					assert.Equal(t, quorum.Pending, r.Vote(i), "voter %d has not answered", i)
				}
			}
		})
	}
}

func TestDecideLosesAsSoonAsMajorityImpossible(t *testing.T) {
	synctest.Test(t, testDecideLosesAsSoonAsMajorityImpossible)
}

func testDecideLosesAsSoonAsMajorityImpossible(t *testing.T) {
	v := newVoters(5)
	r := ask(5, v.ask)
	t.Cleanup(func() { v.finish(r) })
	v.answer(0, quorum.Yes)
	v.answer(1, quorum.No)
	v.answer(2, quorum.No)
	synctest.Wait() // three replies are in; voters 3 and 4 are blocked
	v.answer(3, quorum.No)
	require.NoError(t, r.Decide(t.Context(), nil))
	tally := r.Tally()
	assert.True(t, tally.Lost())
	assert.False(t, tally.Unavailable(), "lost to No votes, not to failures")
	assert.Equal(t, 1, tally.Pending())
}

// A node that fails fast, next to two No votes, must not make the round
// look unavailable while the slower nodes, which would say No too, have not
// answered: Decide waits for them.
func TestDecideWaitsToTellHeldFromUnavailable(t *testing.T) {
	synctest.Test(t, testDecideWaitsToTellHeldFromUnavailable)
}

func testDecideWaitsToTellHeldFromUnavailable(t *testing.T) {
	v := newVoters(5)
	r := ask(5, v.ask)
	t.Cleanup(func() { v.finish(r) })
	v.fail(0, errors.New("connection refused"))
	v.answer(1, quorum.No)
	v.answer(2, quorum.No)
	decided := make(chan error, 1)
	go func() { decided <- r.Decide(t.Context(), nil) }()
	synctest.Wait() // Decide has recorded the three answers and waits
	select {
	case <-decided:
		t.Fatal("decided with the cause of the loss still open")
	default:
	}
	v.answer(3, quorum.No)
	v.answer(4, quorum.No)
	require.NoError(t, <-decided)
	tally := r.Tally()
	assert.True(t, tally.Lost())
	assert.False(t, tally.Unavailable(), "held on a majority: not for want of nodes")
}

func TestDeadlineExpiresPendingVoters(t *testing.T) {
	synctest.Test(t, testDeadlineExpiresPendingVoters)
}

func testDeadlineExpiresPendingVoters(t *testing.T) {
	v := newVoters(3)
	r := ask(3, v.ask)
	t.Cleanup(func() { v.finish(r) })
	v.answer(0, quorum.Yes)
	synctest.Wait() // voter 0's reply is in the round's channel; 1 and 2 are blocked
	deadline := make(chan time.Time, 1)
	deadline <- time.Time{}
	err := r.Decide(t.Context(), deadline)
	require.ErrorIs(t, err, round.ErrDeadline)
	tally := r.Tally()
	// The reply that had already arrived is counted before the deadline.
	assert.Equal(t, 1, tally.Yes)
	assert.Equal(t, 2, tally.Failed)
	assert.True(t, tally.Unavailable())
	for _, rep := range r.Replies() {
		if rep.Node != 0 {
			assert.ErrorIs(t, rep.Err, round.ErrDeadline)
		}
	}
}

func TestDecideStopsOnContext(t *testing.T) {
	v := newVoters(3)
	r := ask(3, v.ask)
	t.Cleanup(func() { v.finish(r) })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := r.Decide(ctx, nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, r.Tally().Decided())
	assert.Equal(t, 3, r.Tally().Pending(), "cancellation does not turn pending voters into failures")
}

func TestCollectWaitsForEveryVoter(t *testing.T) {
	v := newVoters(3)
	r := ask(3, v.ask)
	t.Cleanup(func() { v.finish(r) })
	v.answer(0, quorum.Yes)
	v.answer(1, quorum.Yes)
	require.NoError(t, r.Decide(t.Context(), nil))
	assert.Equal(t, 1, r.Tally().Pending())
	v.answer(2, quorum.No)
	require.NoError(t, r.Collect(t.Context(), nil))
	assert.Equal(t, 0, r.Tally().Pending())
	assert.Equal(t, quorum.No, r.Vote(2))
}

func TestSingleVoter(t *testing.T) {
	for _, vote := range []quorum.Vote{quorum.Yes, quorum.No} {
		r := ask(1, func(int) (quorum.Vote, int, error) { return vote, 0, nil })
		require.NoError(t, r.Decide(t.Context(), nil))
		assert.Equal(t, vote == quorum.Yes, r.Tally().Won())
		r.Wait()
	}
}

func TestFailedWithoutErrorAndBadVotesAreFailures(t *testing.T) {
	r := ask(2, func(i int) (quorum.Vote, int, error) {
		if i == 0 {
			return quorum.Failed, 0, nil
		}
		return quorum.Vote(42), 0, nil
	})
	require.NoError(t, r.Collect(t.Context(), nil))
	assert.Equal(t, 2, r.Tally().Failed)
	for _, rep := range r.Replies() {
		assert.Error(t, rep.Err)
	}
	r.Wait()
}

// sleepingRound returns a round of one voter with a timeout of 100ms on fc,
// never stalled, whose Decide runs in a goroutine and has gone to sleep
// (until fc.Now()+100ms, to look at its voter not yet asked); and the
// channel Decide's result comes on.
func sleepingRound(t *testing.T, fc *clock.Fake) (*round.Round[int], <-chan error) {
	t.Helper()
	r := round.New[int](1, fc, 100*time.Millisecond, func(int) bool { return false })
	done := make(chan error, 1)
	go func() { done <- r.Decide(t.Context(), nil) }()
	synctest.Wait()
	return r, done
}

// advance moves fc on by d and waits until every goroutine of the bubble is
// blocked again.
func advance(fc *clock.Fake, d time.Duration) {
	fc.Advance(d)
	synctest.Wait()
}

// A voter's timeout runs from its departure, also when the reader sleeps
// with a timer set before the departure (checking on voters not yet asked),
// and the departure did not wake it.
func TestTimeoutRunsFromALaterDeparture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := clock.NewFake(time.Unix(1000, 0))
		r, done := sleepingRound(t, fc)
		fc.Advance(50 * time.Millisecond)
		r.Sent(0, fc.Now()) // times out at +150ms
		synctest.Wait()
		advance(fc, 99*time.Millisecond)
		require.Empty(t, done, "expired before its timeout had passed from its departure")
		advance(fc, time.Millisecond)
		require.Len(t, done, 1, "not expired once its timeout passed from its departure")
		require.NoError(t, <-done)
		require.Equal(t, quorum.Failed, r.Vote(0))
		require.ErrorIs(t, r.Replies()[0].Err, round.ErrDeadline)
	})
}

// A departure whose timeout ends before the reader's timer fires wakes the
// reader, which then expires the voter on time.
func TestEarlyDepartureWakesTheReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := clock.NewFake(time.Unix(1000, 0))
		start := fc.Now()
		r, done := sleepingRound(t, fc) // sleeps until start+100ms
		fc.Advance(10 * time.Millisecond)
		r.Sent(0, start.Add(-50*time.Millisecond)) // times out at start+50ms
		synctest.Wait()
		advance(fc, 39*time.Millisecond)
		require.Empty(t, done, "expired before its timeout")
		advance(fc, time.Millisecond)
		require.Len(t, done, 1, "not expired at its timeout: the departure did not wake the reader")
		require.NoError(t, <-done)
		require.Equal(t, quorum.Failed, r.Vote(0))
	})
}

// Answers, and a second call for a voter, arrive from many goroutines at
// once; each voter is counted once, with its first answer (run with -race).
func TestConcurrentAnswersCountedOnce(t *testing.T) {
	const n = 9
	r := round.New[int](n, nil, 0, nil)
	var g sync.WaitGroup
	for i := range n {
		g.Go(func() {
			r.Sent(i, time.Now())
			r.Answer(i, quorum.Yes, i, nil)
			r.Answer(i, quorum.No, -1, nil) // ignored
		})
	}
	require.NoError(t, r.Collect(t.Context(), nil))
	g.Wait()
	require.NoError(t, r.Collect(t.Context(), nil))
	assert.Equal(t, n, r.Tally().Yes)
	require.Len(t, r.Replies(), n)
	for _, rep := range r.Replies() {
		assert.Equal(t, rep.Node, rep.Value)
	}
}

// A question that waits unsent a whole timeout counts as Failed with
// ErrDeadline if its asker says the voter is stalled, and waits on if the
// asker only fell behind.
func TestUnsentQuestionFailsOnlyWhenTheVoterStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fc := clock.NewFake(time.Unix(1000, 0))
		r := round.New[int](2, fc, 100*time.Millisecond, func(i int) bool { return i == 1 })
		done := make(chan error, 1)
		go func() { done <- r.Collect(t.Context(), nil) }()
		synctest.Wait()
		advance(fc, 99*time.Millisecond)
		require.Empty(t, done, "expired before a whole timeout")
		advance(fc, time.Millisecond)
		assert.Equal(t, quorum.Pending, r.Vote(0), "the asker fell behind: waits on")
		r.Answer(0, quorum.Yes, 0, nil)
		synctest.Wait()
		require.Len(t, done, 1)
		require.NoError(t, <-done)
		require.Equal(t, quorum.Failed, r.Vote(1), "stalled: failed")
		require.ErrorIs(t, r.Replies()[0].Err, round.ErrDeadline)
	})
}

// A deadline that fires before an asked voter's timeout has run out records
// it as ErrCutShort (the round ended first; the voter did not fail), one
// whose timeout ran out unread as ErrDeadline, and one not asked as
// ErrNotSent, as of the time the deadline sent.
func TestDeadlineTellsCutShortFromTimedOut(t *testing.T) {
	fc := clock.NewFake(time.Unix(1000, 0))
	r := round.New[int](3, fc, 100*time.Millisecond, nil)
	r.Sent(0, fc.Now().Add(-150*time.Millisecond)) // its timeout ran out 50ms ago
	r.Sent(1, fc.Now().Add(-50*time.Millisecond))  // 50ms of it left
	deadline := make(chan time.Time, 1)
	deadline <- fc.Now()
	require.ErrorIs(t, r.Decide(t.Context(), deadline), round.ErrDeadline)
	got := map[int]error{}
	for _, rep := range r.Replies() {
		got[rep.Node] = rep.Err
	}
	assert.ErrorIs(t, got[0], round.ErrDeadline)
	assert.ErrorIs(t, got[1], round.ErrCutShort)
	assert.ErrorIs(t, got[2], round.ErrNotSent)
}
