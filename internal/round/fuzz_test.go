package round_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/quorum"
)

// FuzzDecide checks the early-decision rule of a Round against an
// independent recomputation, for every way N voters (1 <= N <= 9) can answer
// and every order in which their answers can arrive.
//
// The fuzz input is decoded by decodeFuzzCase:
//   - n: N = 1 + n%9;
//   - answers: byte i (cycled) is voter i's answer, b%5: 0 Yes, 1 No,
//     2 Failed with an error, 3 Failed without an error, 4 a vote that is
//     none of Yes/No/Failed; Ask must turn the last two into Failed;
//   - order: drives a Fisher-Yates shuffle of the voters: the order in which
//     the test releases them;
//   - deadline: the deadline fires after deadline%(N+2) releases; a value of
//     N+1 means it never fires and every voter is released.
//
// Voters block on their own channel until released. After each release,
// synctest.Wait guarantees the reply is in the round's channel, so a
// non-blocking probe (Decide with an already cancelled ctx, which counts
// every reply that has arrived but leaves pending voters Pending) shows
// whether the round has decided. It must have decided exactly when the
// released votes determine the outcome, no later and no earlier.
func FuzzDecide(f *testing.F) {
	const (
		y = 0 // Yes
		n = 1 // No
		e = 2 // Failed with an error
		z = 3 // Failed without an error
		b = 4 // not a valid vote
	)
	// never is a deadline value that never fires for that many voters.
	never := func(voters int) uint8 { return uint8(voters + 1) }
	seeds := []struct {
		voters   int
		answers  []byte
		order    []byte
		deadline uint8
	}{
		{5, []byte{y, y, y, y, y}, nil, never(5)},                      // all yes: won on the third
		{4, []byte{y, y, n, n}, nil, never(4)},                         // 2/2 is not a majority of 4
		{4, []byte{y, n, y, n}, []byte{3, 1, 0}, never(4)},             // even split, interleaved
		{6, []byte{y, y, y, n, n, n}, nil, never(6)},                   // 3/3 is not a majority of 6
		{6, []byte{y, y, y, e, e, e}, []byte{5, 4, 3, 2, 1}, never(6)}, // 3 yes, 3 failed: unavailable
		{6, []byte{y, y, y, y, n, n}, []byte{0, 0, 0, 0, 0}, never(6)}, // 4 of 6 wins
		{5, []byte{e, e, e, e, e}, nil, never(5)},                      // all failed
		{5, []byte{z, b, z, b, z}, nil, never(5)},                      // malformed votes are failures
		{1, []byte{y}, nil, never(1)},                                  // single voter, yes
		{1, []byte{n}, nil, never(1)},                                  // single voter, no
		{1, []byte{e}, nil, never(1)},                                  // single voter, failed
		{1, []byte{y}, nil, 0},                                         // single voter, deadline first
		{2, []byte{y, n}, nil, never(2)},                               // 1 of 2 is not a majority
		{3, []byte{y, n, e}, nil, never(3)},                            // lost to a failure: unavailable
		{5, []byte{n, n, n, e, e}, nil, never(5)},                      // held elsewhere, some failed
		{5, []byte{y, y, e, n, n}, []byte{4, 3, 2, 1}, never(5)},       // the failure decides
		{5, []byte{y, y, y, y, y}, nil, 2},                             // deadline after 2 yes: unavailable
		{5, []byte{y, y, y, n, n}, nil, 3},                             // deadline after the decision
		{5, []byte{n, n, y, y, y}, nil, 2},                             // deadline after 2 no
		{5, []byte{n, n, n, y, y}, nil, 1},                             // deadline after 1 no: still unavailable
		{4, []byte{n, n, y, y}, nil, 2},                                // deadline after 2 no of 4: lost, not unavailable
		{7, []byte{y, n, e, y, n, e, y}, []byte{6, 2, 4, 1, 3, 0}, never(7)},
		{9, []byte{y, n, e, z, b, y, y, n, y}, []byte{8, 7, 6, 5, 4, 3, 2, 1}, never(9)},
		{9, []byte{y, y, y, y, y, n, n, n, n}, []byte{0, 1, 2, 3, 4, 5, 6, 7}, 5},
		{9, []byte{n, n, n, n, n, y, y, y, y}, []byte{0, 1, 2, 3, 4, 5, 6, 7}, 5},
	}
	for _, s := range seeds {
		f.Add(uint8(s.voters-1), s.answers, s.order, s.deadline)
	}
	f.Fuzz(func(t *testing.T, voters uint8, answers, order []byte, deadline uint8) {
		c := decodeFuzzCase(voters, answers, order, deadline)
		synctest.Test(t, func(t *testing.T) { c.run(t) })
	})
}

// fuzzCase is one decoded input of FuzzDecide.
type fuzzCase struct {
	n        int
	answers  []fuzzAnswer // per voter
	order    []int        // release order, a permutation of 0..n-1
	deadline int          // releases before the deadline fires; > n: never
}

type fuzzAnswer struct {
	vote quorum.Vote // what the voter returns
	err  error       // the error it returns with it
	want quorum.Vote // what the round must record
}

func decodeFuzzCase(n uint8, answers, order []byte, deadline uint8) fuzzCase {
	c := fuzzCase{n: 1 + int(n)%9}
	for i := range c.n {
		code := byte(0)
		if len(answers) > 0 {
			code = answers[i%len(answers)]
		}
		var a fuzzAnswer
		switch code % 5 {
		case 0:
			a = fuzzAnswer{vote: quorum.Yes, want: quorum.Yes}
		case 1:
			a = fuzzAnswer{vote: quorum.No, want: quorum.No}
		case 2:
			a = fuzzAnswer{vote: quorum.Failed, err: fmt.Errorf("voter %d: %w", i, errVoter), want: quorum.Failed}
		case 3:
			a = fuzzAnswer{vote: quorum.Failed, want: quorum.Failed}
		case 4:
			bogus := []quorum.Vote{quorum.Pending, quorum.Vote(4), quorum.Vote(255)}
			a = fuzzAnswer{vote: bogus[int(code/5)%len(bogus)], want: quorum.Failed}
		}
		c.answers = append(c.answers, a)
	}
	c.order = make([]int, c.n)
	for i := range c.order {
		c.order[i] = i
	}
	for k, i := 0, c.n-1; i > 0; k, i = k+1, i-1 {
		if k >= len(order) {
			break
		}
		j := int(order[k]) % (i + 1)
		c.order[i], c.order[j] = c.order[j], c.order[i]
	}
	c.deadline = int(deadline) % (c.n + 2)
	return c
}

var errVoter = errors.New("fuzz: voter failed")

// model recomputes a tally from the votes released so far, without the
// quorum package's arithmetic.
type model struct {
	n, need, yes, no, failed int
}

func (m *model) add(v quorum.Vote) {
	switch v {
	case quorum.Yes:
		m.yes++
	case quorum.No:
		m.no++
	case quorum.Failed:
		m.failed++
	}
}

func (m model) pending() int { return m.n - m.yes - m.no - m.failed }
func (m model) won() bool    { return m.yes >= m.need }
func (m model) lost() bool   { return m.yes+m.pending() < m.need }

// decided: won, or lost with the pending voters unable to change whether it
// is unavailable (another owner holds a majority whatever they say, failures
// leave no majority whatever they say, or none is left).
func (m model) decided() bool {
	return m.won() || m.lost() && (m.n-m.no < m.need || m.yes+m.failed >= m.need || m.pending() == 0)
}

// unavailable: lost, some voter failed, and had every failed voter said Yes
// a majority would still have been possible.
func (m model) unavailable() bool { return m.lost() && m.failed > 0 && m.n-m.no >= m.need }

func (m model) String() string {
	return fmt.Sprintf("model yes=%d no=%d failed=%d pending=%d of %d (need %d)",
		m.yes, m.no, m.failed, m.pending(), m.n, m.need)
}

func (c fuzzCase) run(t *testing.T) {
	release := make([]chan struct{}, c.n)
	for i := range release {
		release[i] = make(chan struct{})
	}
	r := ask(c.n, func(i int) (quorum.Vote, int, error) {
		<-release[i]
		return c.answers[i].vote, i, c.answers[i].err
	})
	released := make([]bool, c.n)
	t.Cleanup(func() {
		for i, ch := range release {
			if !released[i] {
				close(ch)
			}
		}
		r.Wait()
	})

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	// probe counts every reply that has arrived without blocking and without
	// turning pending voters into failures.
	probe := func() bool {
		t.Helper()
		err := r.Decide(cancelled, nil)
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.Equal(t, err == nil, r.Tally().Decided(), "Decide's result and Tally.Decided agree")
		return err == nil
	}

	m := model{n: c.n, need: c.n/2 + 1}
	synctest.Wait() // every voter is blocked on its channel
	require.False(t, probe(), "decided before any vote")
	c.check(t, r.Round, m, released)

	var decidedAt model // the votes that were in when the round decided
	decided := false
	for k, i := range c.order {
		if k == c.deadline {
			c.fireDeadline(t, r.Round, m, release, released, decided)
			return
		}
		close(release[i])
		released[i] = true
		synctest.Wait()          // voter i's reply is in the round's channel
		m.add(c.answers[i].want) // counted by the probe, decided or not
		got := probe()
		if decided {
			require.True(t, got, "a decided round stays decided")
			continue
		}
		require.Equal(t, m.decided(), got,
			"after release %d (voter %d): decided must be true exactly when the votes so far settle it; %v; round %v",
			k+1, i, m, r.Tally())
		c.check(t, r.Round, m, released)
		require.Len(t, r.Replies(), k+1, "every reply released so far is counted")
		if got {
			decided, decidedAt = true, m
		}
	}
	require.True(t, decided, "every voter answered, so the round is decided")
	if c.deadline == c.n {
		c.fireDeadline(t, r.Round, m, release, released, decided) // fires after the last answer: changes nothing
	}
	tally := r.Tally()
	assert.Equal(t, decidedAt.won(), tally.Won(), "Won after further replies that Decide does not read")
	assert.Equal(t, decidedAt.unavailable(), tally.Unavailable())

	// Collect reads the replies the early decision left in the channel.
	require.NoError(t, r.Collect(t.Context(), nil))
	var all model
	all.n, all.need = c.n, c.n/2+1
	for _, a := range c.answers {
		all.add(a.want)
	}
	c.check(t, r.Round, all, released)
	for i, a := range c.answers {
		assert.Equal(t, a.want, r.Vote(i), "voter %d after Collect", i)
	}
}

// fireDeadline gives Decide a deadline that has already fired, after the
// releases so far. An undecided round records every pending voter as Failed
// with ErrDeadline, which decides it; a decided round is left as it was.
func (c fuzzCase) fireDeadline(t *testing.T, r *round.Round[int], m model, release []chan struct{}, released []bool, decided bool) {
	t.Helper()
	fired := make(chan time.Time, 1)
	fired <- time.Time{}
	err := r.Decide(t.Context(), fired)
	if decided {
		require.NoError(t, err, "a decided round ignores the deadline")
		c.check(t, r, m, released)
		for i := range c.n {
			if !released[i] {
				assert.Equal(t, quorum.Pending, r.Vote(i), "voter %d: not expired once decided", i)
			}
		}
		return
	}
	require.ErrorIs(t, err, round.ErrDeadline)
	expired := m
	for i := range c.n {
		if !released[i] {
			expired.add(quorum.Failed)
		}
	}
	tally := r.Tally()
	require.True(t, tally.Decided(), "no voter is pending after the deadline")
	assert.Zero(t, tally.Pending())
	assert.Equal(t, expired.yes, tally.Yes)
	assert.Equal(t, expired.no, tally.No)
	assert.Equal(t, expired.failed, tally.Failed)
	assert.Equal(t, expired.won(), tally.Won(), "won after the deadline; %v", expired)
	assert.Equal(t, expired.lost(), tally.Lost(), "lost after the deadline; %v", expired)
	assert.Equal(t, expired.unavailable(), tally.Unavailable(), "unavailable after the deadline; %v", expired)
	for _, rep := range r.Replies() {
		if !released[rep.Node] {
			assert.Equal(t, quorum.Failed, rep.Vote, "voter %d", rep.Node)
			assert.ErrorIs(t, rep.Err, round.ErrDeadline, "voter %d", rep.Node)
		} else {
			assert.NotErrorIs(t, rep.Err, round.ErrDeadline, "voter %d answered before the deadline", rep.Node)
		}
	}

	// Answers that come after the deadline are not counted.
	for i := range c.n {
		if !released[i] {
			close(release[i])
			released[i] = true
		}
	}
	synctest.Wait()
	require.NoError(t, r.Collect(t.Context(), nil))
	assert.Equal(t, tally, r.Tally(), "late answers change nothing")
	for _, rep := range r.Replies() {
		if errors.Is(rep.Err, round.ErrDeadline) {
			assert.Equal(t, quorum.Failed, r.Vote(rep.Node))
		}
	}
}

// check compares the round with the model: the counts, each voter's
// recorded vote, and the outcome when decided.
func (c fuzzCase) check(t *testing.T, r *round.Round[int], m model, released []bool) {
	t.Helper()
	tally := r.Tally()
	require.Equal(t, c.n, tally.N)
	require.Equal(t, m.need, tally.Need)
	require.Equal(t, m.yes, tally.Yes, "%v; round %v", m, tally)
	require.Equal(t, m.no, tally.No, "%v; round %v", m, tally)
	require.Equal(t, m.failed, tally.Failed, "%v; round %v", m, tally)
	require.Equal(t, m.pending(), tally.Pending())
	require.Equal(t, m.decided(), tally.Decided())
	if tally.Decided() {
		require.Equal(t, m.won(), tally.Won(), "%v", m)
		require.Equal(t, m.lost(), tally.Lost(), "%v", m)
		require.Equal(t, m.unavailable(), tally.Unavailable(), "%v", m)
		require.NotEqual(t, tally.Won(), tally.Lost(), "exactly one of won and lost")
	}
	counted := map[int]bool{}
	for _, rep := range r.Replies() {
		require.False(t, counted[rep.Node], "voter %d recorded twice", rep.Node)
		counted[rep.Node] = true
		a := c.answers[rep.Node]
		require.Equal(t, a.want, rep.Vote, "voter %d", rep.Node)
		require.Equal(t, rep.Node, rep.Value, "the value comes with the vote")
		if rep.Vote == quorum.Failed {
			require.Error(t, rep.Err, "voter %d failed without an error", rep.Node)
			if a.err != nil {
				require.ErrorIs(t, rep.Err, errVoter)
			}
		} else {
			require.NoError(t, rep.Err)
		}
	}
	for i := range c.n {
		if !released[i] {
			require.Equal(t, quorum.Pending, r.Vote(i), "voter %d has not answered", i)
		}
		if counted[i] {
			require.Equal(t, c.answers[i].want, r.Vote(i), "voter %d", i)
		}
	}
}
