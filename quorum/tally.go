package quorum

import "fmt"

// Vote is one voter's answer.
type Vote uint8

const (
	// Pending means the voter has not answered yet.
	Pending Vote = iota
	// Yes means the voter granted the request (took, extended or released the key).
	Yes
	// No means the voter answered and refused: the key belongs to someone else
	// or is gone.
	No
	// Failed means the voter did not give a usable answer: an error, a timeout,
	// a reply of the wrong shape.
	Failed
)

func (v Vote) String() string {
	if v <= Failed {
		return [...]string{"pending", "yes", "no", "failed"}[v]
	}
	return fmt.Sprintf("Vote(%d)", uint8(v))
}

// Majority returns the number of votes a majority of n voters needs: n/2+1.
// For n = 4 that is 3, so a 2/2 split is not a majority.
func Majority(n int) int { return n/2 + 1 }

// Tally counts the votes of one round. Make one with NewTally.
type Tally struct {
	N      int // configured voters
	Need   int // votes for a majority: N/2+1
	Yes    int
	No     int
	Failed int
}

// NewTally returns an empty tally for n voters.
func NewTally(n int) Tally { return Tally{N: n, Need: Majority(n)} }

// Add counts one vote. Pending is ignored.
func (t *Tally) Add(v Vote) {
	switch v {
	case Yes:
		t.Yes++
	case No:
		t.No++
	case Failed:
		t.Failed++
	}
}

// Pending returns the number of voters that have not answered.
func (t Tally) Pending() int { return t.N - t.Yes - t.No - t.Failed }

// Won reports whether a majority voted Yes.
func (t Tally) Won() bool { return t.N > 0 && t.Yes >= t.Need }

// Lost reports whether a majority of Yes votes has become impossible, counting
// every pending voter as a possible Yes.
func (t Tally) Lost() bool { return t.Yes+t.Pending() < t.Need }

// Decided reports whether the outcome and, for a loss, its cause are known:
// Won, or Lost with the answers still pending unable to change whether
// Unavailable holds. A loss with failures among the answers can be either
// kind until the pending voters answer: with one voter of five failed and two
// saying No, the last two decide whether another owner holds a majority (they
// say No too) or failures prevented one. So a round whose voters all answer
// No or fail quickly is not reported as Unavailable because a slower No had
// not arrived yet. Without failures a loss is decided as soon as it is Lost.
func (t Tally) Decided() bool {
	if t.Won() {
		return true
	}
	if !t.Lost() {
		return false
	}
	// Held elsewhere whatever the pending say, or failures enough whatever
	// they say, or nobody left to hear from.
	return t.N-t.No < t.Need || t.Yes+t.Failed >= t.Need || t.Pending() == 0
}

// Unavailable reports whether the round is lost because voters failed, not
// because they said No: had every failed voter said Yes, a majority was still
// possible. A round lost to No votes alone (the key is held elsewhere on a
// majority) is not Unavailable, even if some voters failed as well.
func (t Tally) Unavailable() bool { return t.Lost() && t.Failed > 0 && t.N-t.No >= t.Need }

// String formats the tally as "yes=3 no=1 failed=1 pending=0 of 5 (need 3)".
func (t Tally) String() string {
	return fmt.Sprintf("yes=%d no=%d failed=%d pending=%d of %d (need %d)",
		t.Yes, t.No, t.Failed, t.Pending(), t.N, t.Need)
}
