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

// fenced is a section of name x, protected from enter to enter+10, with a
// fencing token.
func fenced(client string, enter int64, token uint64) section {
	return section{Client: client, Name: "x", Enter: enter, Exit: enter + 10, Until: enter + 100, Fence: token}
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
