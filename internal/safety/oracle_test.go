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
type section struct {
	Client string `json:"client"`
	Name   string `json:"name"`
	Enter  int64  `json:"enter"`
	Exit   int64  `json:"exit"`
	Until  int64  `json:"until"`
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

// violations returns, for each name, every pair of protected sections of
// different holders that overlap in time: two owners at once.
func (o *oracle) violations() []string {
	o.mu.Lock()
	byName := map[string][]section{}
	for _, s := range o.sections {
		byName[s.Name] = append(byName[s.Name], s)
	}
	o.mu.Unlock()
	var found []string
	for name, ss := range byName {
		slices.SortFunc(ss, func(a, b section) int { return cmp.Compare(a.Enter, b.Enter) })
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

type durationNs int64

func (d durationNs) String() string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }
