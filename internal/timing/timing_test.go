package timing_test

import (
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/timing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidity(t *testing.T) {
	tests := []struct {
		name    string
		ttl     time.Duration
		elapsed time.Duration
		drift   float64
		want    time.Duration
	}{
		{"redlock example: 10s, 1%", 10 * time.Second, 0, 0.01, 10*time.Second - 100*time.Millisecond - 2*time.Millisecond},
		{"elapsed is subtracted", 8 * time.Second, 30 * time.Millisecond, 0.01, 8*time.Second - 30*time.Millisecond - 80*time.Millisecond - 2*time.Millisecond},
		{"no drift factor still keeps 2ms", time.Second, 0, 0, time.Second - 2*time.Millisecond},
		{"exhausted", 100 * time.Millisecond, 99 * time.Millisecond, 0.01, -2 * time.Millisecond},
		{"3ms TTL is the smallest with validity", 3 * time.Millisecond, 0, 0.01, 3*time.Millisecond - 30*time.Microsecond - 2*time.Millisecond},
		{"2ms TTL has none", 2 * time.Millisecond, 0, 0.01, -20 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, timing.Validity(tt.ttl, tt.elapsed, tt.drift))
		})
	}
}

func TestDriftAllowanceSaturates(t *testing.T) {
	assert.Equal(t, time.Duration(math.MaxInt64), timing.DriftAllowance(math.MaxInt64, 1))
	assert.Positive(t, timing.Validity(1<<62, 0, 0.49))
}

func TestCheckDriftFactor(t *testing.T) {
	for _, f := range []float64{0, 0.01, 0.49} {
		assert.NoError(t, timing.CheckDriftFactor(f), "%v", f)
	}
	for _, f := range []float64{-0.01, 0.5, 1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		assert.ErrorContains(t, timing.CheckDriftFactor(f), "drift factor", "%v", f)
	}
}

// stall keeps n goroutines busy for d each on one thread, so that the last
// ones wait about (n-1)*d to run.
func stall(n int, d time.Duration) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for end := time.Now().Add(d); time.Now().Before(end); {
			}
		})
	}
	wg.Wait()
}

// A long wait to run stays seen for as long as it counts, however many
// reads follow that find short waits (a burst's thousands of rounds read
// at once): review 18 saw it forgotten after 16, and healthy nodes were
// then judged silent.
func TestALongWaitIsNotForgottenAmongShortOnes(t *testing.T) {
	timing.WaitedToRun(time.Now(), math.MaxInt64) // the baseline, as node.New takes it
	began := time.Now()
	seen := false
	// The runtime samples about one scheduling in 8 into /sched/latencies,
	// so a stall's long waits can all go unsampled (about 1 in 100: once
	// on CI); three stalls make that about 1 in a million.
	for range 3 {
		stall(40, 10*time.Millisecond) // waits of up to about 390ms
		if seen = timing.WaitedToRunSampled(began, 50*time.Millisecond); seen {
			break
		}
	}
	require.True(t, seen, "the stall is seen")
	for range 100 {
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() { time.Sleep(time.Microsecond) })
		}
		wg.Wait()
		timing.WaitedToRunSampled(began, time.Hour) // another round's read, finding short waits
	}
	assert.True(t, timing.WaitedToRunSampled(began, 50*time.Millisecond), "still seen after 100 reads")
}
