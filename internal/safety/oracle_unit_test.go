package safety_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The oracle must catch what it exists to catch; these cases would pass an
// oracle that could not fail.
func TestOracleFindsOverlaps(t *testing.T) {
	tests := []struct {
		name     string
		sections []section
		want     int
	}{
		{"disjoint", []section{{Client: "a", Name: "x", Enter: 0, Exit: 10, Until: 100}, {Client: "b", Name: "x", Enter: 10, Exit: 20, Until: 100}}, 0},
		{"overlap", []section{{Client: "a", Name: "x", Enter: 0, Exit: 10, Until: 100}, {Client: "b", Name: "x", Enter: 5, Exit: 20, Until: 100}}, 1},
		{"nested", []section{{Client: "a", Name: "x", Enter: 0, Exit: 50, Until: 100}, {Client: "b", Name: "x", Enter: 10, Exit: 20, Until: 100}, {Client: "c", Name: "x", Enter: 30, Exit: 40, Until: 100}}, 2},
		{"other names do not conflict", []section{{Client: "a", Name: "x", Enter: 0, Exit: 10, Until: 100}, {Client: "b", Name: "y", Enter: 5, Exit: 20, Until: 100}}, 0},
		{"past validity is not protected", []section{{Client: "a", Name: "x", Enter: 0, Exit: 50, Until: 10}, {Client: "b", Name: "x", Enter: 10, Exit: 20, Until: 100}}, 0},
		{"within validity is", []section{{Client: "a", Name: "x", Enter: 0, Exit: 50, Until: 11}, {Client: "b", Name: "x", Enter: 10, Exit: 20, Until: 100}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o oracle
			o.add(tt.sections)
			assert.Len(t, o.violations(), tt.want)
		})
	}
}

// held is a section of name x of the given kind, protected from enter to
// exit; limit is a permit's semaphore limit.
func held(client, kind string, enter, exit int64, limit int) section {
	return section{Client: client, Name: "x", Enter: enter, Exit: exit, Until: exit + 100, Kind: kind, Limit: limit}
}

// The oracle's rule for each kind of hold: readers share, permits share up
// to their limit, a writer, a Mutex and a name of a multi-name lock share
// with nobody.
func TestOracleFindsHoldsThatMayNotShare(t *testing.T) {
	tests := []struct {
		name     string
		sections []section
		want     int
	}{
		{"readers share", []section{held("a", kindRead, 0, 10, 0), held("b", kindRead, 5, 20, 0), held("c", kindRead, 6, 8, 0)}, 0},
		{"a writer beside a reader", []section{held("a", kindRead, 0, 10, 0), held("b", kindWrite, 5, 20, 0)}, 1},
		{"a reader beside a writer", []section{held("a", kindWrite, 0, 10, 0), held("b", kindRead, 5, 20, 0)}, 1},
		{"two writers", []section{held("a", kindWrite, 0, 10, 0), held("b", kindWrite, 5, 20, 0)}, 1},
		{"a writer after the readers", []section{held("a", kindRead, 0, 10, 0), held("b", kindRead, 2, 12, 0), held("c", kindWrite, 12, 20, 0)}, 0},
		{"permits up to the limit", []section{held("a", kindPermit, 0, 10, 2), held("b", kindPermit, 5, 20, 2), held("c", kindPermit, 10, 30, 2)}, 0},
		{"a permit over the limit", []section{held("a", kindPermit, 0, 10, 2), held("b", kindPermit, 5, 20, 2), held("c", kindPermit, 9, 30, 2)}, 1},
		{"limit 1 is a mutex", []section{held("a", kindPermit, 0, 10, 1), held("b", kindPermit, 5, 20, 1)}, 1},
		{"permits past their validity are not counted", []section{
			{Client: "a", Name: "x", Enter: 0, Exit: 50, Until: 4, Kind: kindPermit, Limit: 2},
			held("b", kindPermit, 1, 20, 2), held("c", kindPermit, 5, 30, 2)}, 0},
		{"a multi-name lock beside a Mutex on one of its names", []section{held("a", kindMulti, 0, 10, 0), held("b", kindMutex, 5, 20, 0)}, 1},
		{"two multi-name locks on one name", []section{held("a", kindMulti, 0, 10, 0), held("b", kindMulti, 5, 20, 0)}, 1},
		{"two leaders", []section{held("a", kindLeader, 0, 10, 0), held("b", kindLeader, 5, 20, 0)}, 1},
		{"a leader after a lost one", []section{{Client: "a", Name: "x", Enter: 0, Exit: 10, Until: 0, Kind: kindLeader}, held("b", kindLeader, 5, 20, 0)}, 0},
		{"a Mutex, then a multi-name lock", []section{held("a", "", 0, 10, 0), held("b", kindMulti, 10, 20, 0)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o oracle
			o.add(tt.sections)
			found := o.violations()
			assert.Len(t, found, tt.want, "%v", found)
		})
	}
}

func TestOracleCountsSharing(t *testing.T) {
	var o oracle
	o.add([]section{held("a", kindRead, 0, 10, 0), held("b", kindRead, 5, 20, 0), held("c", kindRead, 6, 8, 0), held("d", kindRead, 8, 30, 0)})
	e, f := held("e", kindPermit, 0, 10, 2), held("f", kindPermit, 10, 20, 2)
	e.Name, f.Name = "y", "y"
	o.add([]section{e, f})
	assert.Equal(t, 3, o.mostAtOnce(kindRead), "a, b and c; then b and d")
	assert.Equal(t, 1, o.mostAtOnce(kindPermit), "one after the other")
	assert.Zero(t, o.mostAtOnce(kindWrite))
}

// fenced is a section of name x, protected from enter to enter+10, with a
// fencing token.
func fenced(client string, enter int64, token uint64) section {
	return section{Client: client, Name: "x", Enter: enter, Exit: enter + 10, Until: enter + 100, Fence: token}
}

// withKind returns s held as kind, with a permit's limit.
func withKind(s section, kind string, limit int) section {
	s.Kind, s.Limit = kind, limit
	return s
}

func TestOracleFindsFencingViolations(t *testing.T) {
	tests := []struct {
		name     string
		sections []section
		want     int
	}{
		{"increasing", []section{fenced("a", 0, 5), fenced("b", 20, 6), fenced("a", 40, 100)}, 0},
		{"decreasing", []section{fenced("a", 0, 5), fenced("b", 20, 4)}, 1},
		{"equal", []section{fenced("a", 0, 5), fenced("b", 20, 5)}, 1},
		{"below an earlier one, not only the previous", []section{fenced("a", 0, 10), fenced("b", 20, 20), fenced("c", 40, 15), fenced("a", 60, 25)}, 1},
		{"every later section is compared with the largest", []section{fenced("a", 0, 10), fenced("b", 20, 5), fenced("c", 40, 7)}, 2},
		{"ordered by Enter, not by recording", []section{fenced("b", 20, 6), fenced("a", 0, 5)}, 0},
		{"recorded in order, entered out of order", []section{fenced("a", 20, 5), fenced("b", 0, 6)}, 1},
		{"no token", []section{fenced("a", 0, 5), fenced("b", 20, 0)}, 1},
		{"no token first", []section{fenced("a", 0, 0), fenced("b", 20, 5)}, 1},
		{"names have their own order", []section{fenced("a", 0, 5), {Client: "b", Name: "y", Enter: 20, Exit: 30, Until: 100, Fence: 3}}, 0},
		{"past validity is not protected", []section{fenced("a", 0, 5), {Client: "b", Name: "x", Enter: 20, Exit: 30, Until: 20, Fence: 4}}, 0},
		{"a multi-name lock after a Mutex", []section{fenced("a", 0, 5), withKind(fenced("b", 20, 5), kindMulti, 0)}, 1},
		{"a reader after a writer", []section{withKind(fenced("a", 0, 5), kindWrite, 0), withKind(fenced("b", 20, 4), kindRead, 0)}, 1},
		{"a writer above every reader before it", []section{withKind(fenced("a", 0, 7), kindRead, 0), withKind(fenced("b", 5, 6), kindRead, 0),
			withKind(fenced("c", 20, 7), kindWrite, 0)}, 1},
		{"readers in any order", []section{withKind(fenced("a", 0, 7), kindRead, 0), withKind(fenced("b", 5, 6), kindRead, 0)}, 0},
		{"permits in any order", []section{withKind(fenced("a", 0, 7), kindPermit, 2), withKind(fenced("b", 20, 6), kindPermit, 2)}, 0},
		{"a permit without a token", []section{withKind(fenced("a", 0, 0), kindPermit, 2)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o oracle
			o.add(tt.sections)
			found := o.fencingViolations()
			assert.Len(t, found, tt.want, "%v", found)
			assert.Empty(t, o.violations(), "the sections do not overlap: only fencing is at fault")
		})
	}
}

// The fenced resource refuses a token below the largest it accepted, and
// the oracle counts a refusal only within the holder's validity, once per
// acquisition.
func TestResourceRefusesOlderTokens(t *testing.T) {
	var o oracle
	assert.Nil(t, o.write("x", 5))
	assert.Nil(t, o.write("x", 5), "the same holder writes again")
	assert.Nil(t, o.write("y", 1), "each name has its own resource")
	stale := o.write("x", 4)
	if assert.NotNil(t, stale) {
		assert.Equal(t, uint64(5), stale.Over)
	}
	assert.Nil(t, o.write("x", 6), "a newer holder")

	refused := func(client, name string, at, until int64) section {
		return section{Client: client, Name: name, Enter: 0, Exit: 50, Until: until, Fence: 4, Stale: &staleWrite{At: at, Over: 5}}
	}
	multi := &staleWrite{At: 10, Over: 5}
	o.add([]section{
		refused("a", "x", 10, 100),
		refused("b", "x", 60, 100), // after its exit: not its write
		refused("c", "x", 30, 20),  // past its validity
		{Client: "d", Name: "x", Exit: 50, Until: 100, Stale: multi, Kind: kindMulti},
		{Client: "d", Name: "z", Exit: 50, Until: 100, Stale: multi, Kind: kindMulti},
	})
	found := o.staleWrites()
	assert.Len(t, found, 2, "%v", found)
}
