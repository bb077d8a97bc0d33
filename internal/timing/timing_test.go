package timing_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
