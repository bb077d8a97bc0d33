package clock_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
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
			assert.Equal(t, tt.want, clock.Validity(tt.ttl, tt.elapsed, tt.drift))
		})
	}
}

func TestDriftAllowanceSaturates(t *testing.T) {
	assert.Equal(t, time.Duration(math.MaxInt64), clock.DriftAllowance(math.MaxInt64, 1))
	assert.Positive(t, clock.Validity(1<<62, 0, 0.49))
}

func TestCheckDriftFactor(t *testing.T) {
	for _, f := range []float64{0, 0.01, 0.49} {
		assert.NoError(t, clock.CheckDriftFactor(f), "%v", f)
	}
	for _, f := range []float64{-0.01, 0.5, 1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		assert.ErrorContains(t, clock.CheckDriftFactor(f), "drift factor", "%v", f)
	}
}

func TestRealClockIsMonotonic(t *testing.T) {
	c := clock.Real()
	start := c.Now()
	// A wall-clock step would show in Round(0) (which strips the monotonic
	// reading) but not in Since; here we check the reading is present.
	assert.NotEqual(t, start, start.Round(0), "Real().Now() must carry a monotonic reading")
	assert.GreaterOrEqual(t, c.Since(start), time.Duration(0))
	timer := c.NewTimer(time.Millisecond)
	<-timer.C()
	assert.False(t, timer.Stop())
}

func TestFakeTimersFireInOrderOnAdvance(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := clock.NewFake(start)
	a := f.NewTimer(10 * time.Millisecond)
	b := f.NewTimer(30 * time.Millisecond)
	c := f.NewTimer(20 * time.Millisecond)
	assert.Equal(t, 3, f.Timers())
	f.Advance(20 * time.Millisecond)
	assert.Equal(t, start.Add(10*time.Millisecond), <-a.C())
	assert.Equal(t, start.Add(20*time.Millisecond), <-c.C())
	select {
	case <-b.C():
		t.Fatal("timer fired early")
	default:
	}
	assert.True(t, b.Stop())
	assert.False(t, b.Stop())
	f.Advance(time.Hour)
	select {
	case <-b.C():
		t.Fatal("stopped timer fired")
	default:
	}
	assert.Equal(t, start.Add(time.Hour+20*time.Millisecond), f.Now())
	assert.Equal(t, time.Hour+20*time.Millisecond, f.Since(start))
}

func TestFakeZeroTimerFiresAtOnce(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	<-f.NewTimer(0).C()
	<-f.NewTimer(-time.Second).C()
	assert.Zero(t, f.Timers())
}

func TestSleepOnFakeClock(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(t.Context(), f, time.Second) }()
	require.NoError(t, f.BlockUntil(t.Context(), 1))
	f.Advance(time.Second)
	require.NoError(t, <-done)
}

func TestSleepInterruptedByContext(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(ctx, f, time.Hour) }()
	require.NoError(t, f.BlockUntil(t.Context(), 1))
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Zero(t, f.Timers(), "the interrupted sleep stops its timer")
	assert.ErrorIs(t, clock.Sleep(ctx, f, 0), context.Canceled, "a done ctx is reported even for d <= 0")
}

func TestBlockUntilHonoursContext(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, f.BlockUntil(ctx, 1), context.Canceled)
}
