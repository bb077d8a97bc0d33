package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

func TestBlockUntilHonoursContext(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, f.BlockUntil(ctx, 1), context.Canceled)
}
