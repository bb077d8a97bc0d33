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
// acquisition returned and left before its release; Until is the end of the
// validity it held at the time (moved by extensions). All times are monoNow
// readings. Fence is the fencing token of the acquisition (Mutex.FencingToken,
// read right after Lock returned); 0 if it had none.
//
// Kind says what granted it, and so how it holds Name (see hold): a Mutex
// ("" or kindMutex), one name of a multi-name lock, a semaphore's permit
// (Name is the semaphore's, Limit its limit), a read or the write lock of a
// read-write lock, or the work of an idempotency Store's Do (Name is its
// key). A multi-name lock's acquisition is one section per name.
type section struct {
	Client string `json:"client"`
	Name   string `json:"name"`
	Enter  int64  `json:"enter"`
	Exit   int64  `json:"exit"`
	Until  int64  `json:"until"`
	Fence  uint64 `json:"fence"`
	Kind   string `json:"kind,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Done   bool   `json:"done,omitempty"` // kindOnce: the run whose response Do returned as completed
	// Stale is its first write the fenced resource refused (see
	// staleWrites); nil when every write was accepted.
	Stale *staleWrite `json:"stale,omitempty"`
}

// The kinds of critical section, by the primitive that grants them.
const (
	kindMutex  = "mutex"
	kindMulti  = "multi"
	kindPermit = "permit"
	kindRead   = "read"
	kindWrite  = "write"
	kindOnce   = "once"
	kindLeader = "leader"
)

// kinds lists them in the order of the summary line.
var kinds = []string{kindMutex, kindMulti, kindPermit, kindRead, kindWrite, kindOnce, kindLeader}

// kind returns s.Kind, kindMutex when empty.
func (s section) kind() string { return cmp.Or(s.Kind, kindMutex) }

// shares reports whether s may hold its name beside other, held at the same
// time: readers beside readers, permits beside permits (at most Limit of
// them, which violations counts), nothing else beside anything.
func (s section) shares(other section) bool {
	k := s.kind()
	return k == other.kind() && (k == kindRead || k == kindPermit)
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
	resource map[string]uint64 // by name, the largest fencing token written (see write)
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

// holding is a protected section still held: its part from Enter to to.
type holding struct {
	s  section
	to int64
}

// sweep calls visit for every protected section, name by name in the order
// they entered, with the protected sections of that name held when it
// entered (from).
func (o *oracle) sweep(visit func(name string, s section, from int64, held []holding)) {
	for name, ss := range o.byName() {
		var held []holding
		for _, s := range ss {
			from, to, ok := s.protected()
			if !ok {
				continue
			}
			held = slices.DeleteFunc(held, func(h holding) bool { return h.to <= from })
			visit(name, s, from, held)
			held = append(held, holding{s, to})
		}
	}
}

// violations returns, for each name, every protected section that entered
// while the name was held in a way it may not share: beside a holder of
// another kind or of an exclusive kind (two owners of a Mutex or of a name of
// a multi-name lock, a writer beside anyone), or as a permit beside Limit
// other permits. Each such entry is one violation, named with the holder
// reaching furthest among those it conflicts with.
func (o *oracle) violations() []string {
	var found []string
	o.sweep(func(name string, s section, from int64, held []holding) {
		var worst *holding
		permits := 0
		for i, h := range held {
			if h.s.kind() == kindPermit {
				permits++
			}
			if !s.shares(h.s) && (worst == nil || h.to > worst.to) {
				worst = &held[i]
			}
		}
		switch {
		case worst != nil:
			found = append(found, fmt.Sprintf("%s: %s (%s) held [%d, %d] while %s (%s) entered at %d (overlap %v)",
				name, worst.s.Client, worst.s.kind(), worst.s.Enter, worst.to, s.Client, s.kind(), from, durationNs(worst.to-from)))
		case s.kind() == kindPermit && permits >= max(s.Limit, 1):
			found = append(found, fmt.Sprintf("%s: %s entered at %d as holder %d of a semaphore of limit %d",
				name, s.Client, from, permits+1, s.Limit))
		}
	})
	slices.Sort(found)
	return found
}

// mostAtOnce returns the most protected sections of kind that held one name
// at the same time: how much sharing (of permits, of read locks) a run saw.
func (o *oracle) mostAtOnce(kind string) int {
	most := 0
	o.sweep(func(_ string, s section, _ int64, held []holding) {
		if s.kind() != kind {
			return
		}
		n := 1
		for _, h := range held {
			if h.s.kind() == kind {
				n++
			}
		}
		most = max(most, n)
	})
	return most
}

// fencingViolations returns, for each name, every protected section whose
// fencing token is not larger than that of every protected section of the
// same name entered before it that it may not share the name with (see
// shares): fencing tokens must strictly increase from one holder to the
// next, whichever majority of nodes granted each (a resource that refuses
// writes with older tokens relies on it). Holders that share a name (two
// readers, two permits) overlap, and their tokens may come in any order. A
// section without a token is a violation too. Sections that ran wholly past
// their validity are left out, as in violations: the lock no longer
// protected them.
func (o *oracle) fencingViolations() []string {
	var found []string
	for name, ss := range o.byName() {
		top := map[string]section{} // by kind, the protected section with the largest token so far
		for _, s := range ss {
			if _, _, ok := s.protected(); !ok {
				continue
			}
			var above section // the largest token s must be above
			for _, t := range top {
				if !s.shares(t) && t.Fence > above.Fence {
					above = t
				}
			}
			switch {
			case s.Fence == 0:
				found = append(found, fmt.Sprintf("%s: %s (%s) entered at %d without a fencing token", name, s.Client, s.kind(), s.Enter))
			case s.Fence <= above.Fence:
				found = append(found, fmt.Sprintf("%s: %s (%s) entered at %d with fencing token %d, not above %d of %s (%s), entered at %d",
					name, s.Client, s.kind(), s.Enter, s.Fence, above.Fence, above.Client, above.kind(), above.Enter))
			}
			if s.Fence > top[s.kind()].Fence {
				top[s.kind()] = s
			}
		}
	}
	slices.Sort(found)
	return found
}

type durationNs int64

func (d durationNs) String() string { return fmt.Sprintf("%.3fms", float64(d)/1e6) }
