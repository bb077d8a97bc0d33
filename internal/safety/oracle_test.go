package safety_test

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// monoNow reads CLOCK_MONOTONIC in nanoseconds. On Linux every process on the
// machine reads the same clock, so critical sections recorded by separate
// client processes can be merged and compared with those of the test itself.
// (Go's own monotonic readings are relative to each process's start.)
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC always exists on Linux
	}
	return ts.Nano()
}

// section is one critical section as a client saw it: it entered after its
// Lock returned and left before its Unlock; Until is the end of the validity
// it held at the time (moved by extensions). All times are monoNow readings.
// Fence is the fencing token of the acquisition (Mutex.FencingToken, read
// right after Lock returned); 0 if it had none.
type section struct {
	Client string `json:"client"`
	Name   string `json:"name"`
	Enter  int64  `json:"enter"`
	Exit   int64  `json:"exit"`
	Until  int64  `json:"until"`
	Fence  uint64 `json:"fence"`
}

// protected returns the part of the section the lock protected: from Enter to
// Exit, cut at Until. Redlock promises mutual exclusion only within the
// validity; a section that ran past it (the client was starved of CPU) is not
// the lock's to protect, and is counted separately.
func (s section) protected() (from, to int64, ok bool) {
	to = min(s.Exit, s.Until)
	return s.Enter, to, s.Enter < to
}

// oracle collects critical sections from every client and finds overlaps
// between sections of the same name. It is safe for concurrent use.
type oracle struct {
	mu       sync.Mutex
	sections []section
}

func (o *oracle) record(s section) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sections = append(o.sections, s)
}

func (o *oracle) add(ss []section) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sections = append(o.sections, ss...)
}

// overran counts the sections whose Exit came after their Until.
func (o *oracle) overran() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.sections {
		if s.Exit > s.Until {
			n++
		}
	}
	return n
}

// byName returns the sections recorded so far, grouped by name, each group
// in the order the sections were entered.
func (o *oracle) byName() map[string][]section {
	o.mu.Lock()
	defer o.mu.Unlock()
	groups := map[string][]section{}
	for _, s := range o.sections {
		groups[s.Name] = append(groups[s.Name], s)
	}
	for _, ss := range groups {
		slices.SortFunc(ss, func(a, b section) int { return cmp.Compare(a.Enter, b.Enter) })
	}
	return groups
}

// violations returns, for each name, every pair of protected sections of
// different holders that overlap in time: two owners at once.
func (o *oracle) violations() []string {
	var found []string
	for name, ss := range o.byName() {
		var last section // the protected section reaching furthest so far
		var lastTo int64
		for _, s := range ss {
			from, to, ok := s.protected()
			if !ok {
				continue
			}
			if lastTo > from {
				found = append(found, fmt.Sprintf("%s: %s held [%d, %d] while %s entered at %d (overlap %v)",
					name, last.Client, last.Enter, lastTo, s.Client, from, durationNs(lastTo-from)))
			}
			if to > lastTo {
				last, lastTo = s, to
			}
		}
	}
	slices.Sort(found)
	return found
}

// fencingViolations returns, for each name, every protected section whose
// fencing token is not larger than that of every protected section of the
// same name entered before it: fencing tokens must strictly increase from one
// holder to the next, whichever majority of nodes granted each (a resource
// that refuses writes with older tokens relies on it). A section without a
// token is a violation too. Sections that ran wholly past their validity are
// left out, as in violations: the lock no longer protected them.
func (o *oracle) fencingViolations() []string {
	var found []string
	for name, ss := range o.byName() {
		var top section // the protected section with the largest token so far
		for _, s := range ss {
			if _, _, ok := s.protected(); !ok {
				continue
			}
			switch {
			case s.Fence == 0:
				found = append(found, fmt.Sprintf("%s: %s entered at %d without a fencing token", name, s.Client, s.Enter))
			case s.Fence <= top.Fence:
				found = append(found, fmt.Sprintf("%s: %s entered at %d with fencing token %d, not above %d of %s, entered at %d",
					name, s.Client, s.Enter, s.Fence, top.Fence, top.Client, top.Enter))
			}
			if s.Fence > top.Fence {
				top = s
			}
		}
	}
	slices.Sort(found)
	return found
}

type durationNs int64

func (d durationNs) String() string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }
