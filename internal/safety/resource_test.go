package safety_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The fenced resource: what a holder's fencing token protects. Every holder
// of a name it may not share (a Mutex, a name of a multi-name lock, the
// write lock, a leadership) writes to the name's resource with its token when
// it enters its critical section, in its middle and when it leaves; the
// resource refuses a write whose token is below the largest it has accepted,
// as a storage service that checks fencing tokens does. A holder refused
// while still inside its validity was not the only owner: another holder,
// with a larger token, wrote while it held the name. This is the check a
// user's resource makes, independent of the clocks the oracle compares; it
// sees a second owner as long as one of the two writes while the other
// holds, which long critical sections (longPace) make likely.
//
// The resource lives in the oracle, so it is shared by the clients of one
// process: all of them with goroutine clients, each child's own with
// process clients.

// staleWrite is a section's first write the resource refused.
type staleWrite struct {
	At   int64  `json:"at"`   // monoNow when it was refused
	Over uint64 `json:"over"` // the largest token the resource had accepted
}

// write offers a write with token to name's resource and returns the
// refusal, nil when accepted (token at least the largest accepted before).
func (o *oracle) write(name string, token uint64) *staleWrite {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.resource == nil {
		o.resource = map[string]uint64{}
	}
	if top := o.resource[name]; token < top {
		return &staleWrite{At: monoNow(), Over: top}
	}
	o.resource[name] = token
	return nil
}

// writesTo reports whether a holder of kind writes to its names' resources:
// those that hold a name alone. Readers and permits share, and their tokens
// come in any order.
func writesTo(kind string) bool { return kind != kindRead && kind != kindPermit && kind != kindOnce }

// writeAll writes token to the resource of each of names, and returns the
// first refusal, if any, or first when it was already refused.
func (o *oracle) writeAll(names []string, token uint64, first *staleWrite) *staleWrite {
	for _, name := range names {
		if w := o.write(name, token); first == nil {
			first = w
		}
	}
	return first
}

// staleWrites returns every acquisition refused by its resource within its
// validity (see protected): a second owner.
func (o *oracle) staleWrites() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var found []string
	type acquisition struct {
		client string
		enter  int64
	}
	seen := map[acquisition]bool{} // a multi-name lock's sections share one
	for _, s := range o.sections {
		if w, a := s.Stale, (acquisition{s.Client, s.Enter}); w != nil && !seen[a] && w.At < min(s.Exit, s.Until) {
			seen[a] = true
			found = append(found, fmt.Sprintf("%s: %s (%s) entered at %d with fencing token %d, refused at %d (%v into its section, %v before its validity ended): the resource had accepted %d",
				s.Name, s.Client, s.kind(), s.Enter, s.Fence, w.At, durationNs(w.At-s.Enter), durationNs(s.Until-w.At), w.Over))
		}
	}
	slices.Sort(found)
	return found
}

// pace is how long a client's critical section of kind lasts, given the
// validity left when it starts.
type pace func(rng *rand.Rand, kind string, left time.Duration) time.Duration

// shortPace: up to 3ms, well inside every validity; a read lock's lasts 5
// to 25ms, so that readers overlap.
func shortPace(rng *rand.Rand, kind string, _ time.Duration) time.Duration {
	if kind == kindRead {
		return time.Duration(5000+rng.IntN(20000)) * time.Microsecond
	}
	return time.Duration(rng.IntN(3000)) * time.Microsecond
}

// longPace: 30% to 60% of the validity left, at most 250ms (a leadership,
// whose validity the client does not know, 20 to 100ms): a second owner let
// in while the first holds finds it still inside, and each writes to the
// resource while the other holds.
func longPace(rng *rand.Rand, kind string, left time.Duration) time.Duration {
	if kind == kindLeader {
		return time.Duration(20+rng.IntN(80)) * time.Millisecond
	}
	return min(left*time.Duration(30+rng.IntN(31))/100, 400*time.Millisecond)
}
