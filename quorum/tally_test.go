package quorum_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/quorum"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMajority(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, quorum.Majority(n), "n=%d", n)
	}
}

func TestTallyArithmetic(t *testing.T) {
	tests := []struct {
		name                            string
		tally                           quorum.Tally
		won, lost, decided, unavailable bool
	}{
		{"empty", quorum.NewTally(5), false, false, false, false},
		{"majority yes", quorum.Tally{N: 5, Need: 3, Yes: 3}, true, false, true, false},
		{"held elsewhere", quorum.Tally{N: 5, Need: 3, No: 3}, false, true, true, false},
		{"held elsewhere with a failure", quorum.Tally{N: 5, Need: 3, No: 3, Failed: 1}, false, true, true, false},
		{"failures", quorum.Tally{N: 5, Need: 3, Yes: 2, Failed: 3}, false, true, true, true},
		{"mixed: failure decides", quorum.Tally{N: 5, Need: 3, Yes: 2, No: 2, Failed: 1}, false, true, true, true},
		{"still open", quorum.Tally{N: 5, Need: 3, Yes: 2, No: 1}, false, false, false, false},
		// Lost, but the pending two tell a lock held elsewhere (both No)
		// from failures that prevented a majority (a Yes among them).
		{"lost, cause open", quorum.Tally{N: 5, Need: 3, No: 2, Failed: 1}, false, true, false, true},
		{"lost, cause open: it was held", quorum.Tally{N: 5, Need: 3, No: 4, Failed: 1}, false, true, true, false},
		{"lost, cause open: failures after all", quorum.Tally{N: 5, Need: 3, Yes: 1, No: 2, Failed: 2}, false, true, true, true},
		{"lost to failures whatever the pending say", quorum.Tally{N: 5, Need: 3, Yes: 1, No: 1, Failed: 2}, false, true, true, true},
		{"no voters", quorum.NewTally(0), false, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.won, tt.tally.Won(), "won")
			assert.Equal(t, tt.lost, tt.tally.Lost(), "lost")
			assert.Equal(t, tt.decided, tt.tally.Decided(), "decided")
			assert.Equal(t, tt.unavailable, tt.tally.Unavailable(), "unavailable")
		})
	}
}
