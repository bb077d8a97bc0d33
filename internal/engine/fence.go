package engine

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/round"
	"github.com/quorumlock/quorumlock/internal/timing"
	"github.com/quorumlock/quorumlock/quorum"
)

// fence draws a won acquisition's fencing number and writes it back to a
// majority within the validity ("Fencing tokens"); on failure the caller rolls back.
func (l *Contender) fence(ctx context.Context, token string, a *acquisition, budget <-chan time.Time, start time.Time) (uint64, *OpError) {
	s, rd := l.set, a.round
	need := rd.Tally().Need
	var number, highest uint64
	seeded := 0
	drawn := func() {
		number, highest, seeded = 0, 0, 0
		for _, rep := range rd.Replies() {
			if rep.Vote == quorum.Yes && rep.Value.Fence > 0 {
				seeded++
				number = max(number, uint64(rep.Value.Fence))
			}
			highest = max(highest, uint64(max(rep.Value.Counter, 0)))
		}
	}
	if drawn(); seeded < need {
		_ = rd.Collect(ctx, budget) // hear every node before falling back on the clock
		drawn()
	}
	number, ok := s.FenceNumber(number, highest, seeded)
	if !ok {
		return 0, &OpError{msg: fmt.Sprintf("mutex: lock %q not obtained: only %d nodes can vouch for the fencing counter (%d must), and the clock is behind a counter (%v)",
			l.spec.Name, seeded, need, rd.Tally()), is: []error{s.Errors.NotObtained, s.Errors.NodesUnavailable}, nodes: nodeErrors(s, rd)}
	}
	top := number // a passable lock reserves number..number+maxPasses (pass.go)
	if l.passable() {
		top += maxPasses
	}
	// Queued behind each acquire still running; the script is token-checked.
	may := func(i int) bool { return a.sent(i) && rd.Vote(i) != quorum.No }
	commit := send(s, l.timeout(), queueBehindStalled, may, cmp.Or(l.kind.Fence, node.FenceScript),
		l.fenceKeys, []any{token, top}, func(i int, r node.Result) (quorum.Vote, bool, error) {
			ok, err := node.ParseFlag("fence", r.Reply)
			if ok {
				s.Nodes[i].FenceWritten(l.key)
			}
			return vote(ok, err), ok, err
		})
	commit.round.StopOn(s.Closing())
	// How long each write waits: design.md, "Fencing tokens", step 4.
	deadline, stop := timing.Timer(s.Clock, l.budget(start))
	defer stop()
	derr := commit.decide(ctx, deadline)
	if t := commit.round.Tally(); !t.Won() {
		is, why := []error{s.Errors.NotObtained}, ""
		switch {
		case derr == round.ErrDeadline: // undecided until then: slow, not failed
			why = " before the validity ran out"
		case t.Unavailable():
			is = append(is, s.Errors.NodesUnavailable)
		}
		return 0, &OpError{msg: fmt.Sprintf("mutex: lock %q not obtained: fencing number %d not written back to a majority%s (%v)", l.spec.Name, top, why, t),
			is: is, nodes: nodeErrors(s, commit.round)}
	}
	return number, nil
}

// FenceNumber picks a fencing number ("Fencing tokens"): candidate when a
// majority is seeded, else the clock in µs if no counter is ahead, else none.
func (s *Set) FenceNumber(candidate, highest uint64, seeded int) (uint64, bool) {
	now := uint64(max(s.Clock.Now().UnixMicro(), 1))
	switch {
	case seeded >= s.Need():
		return max(candidate, now), true
	case now > highest:
		return now, true
	}
	return 0, false
}
