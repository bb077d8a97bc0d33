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
