package clock

import "time"

// Clock is a source of time. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. For [Real] it carries a monotonic clock
	// reading, so Since and Sub ignore wall-clock steps.
	Now() time.Time
	// Since returns the time elapsed since t, as time.Since does.
	Since(t time.Time) time.Duration
	// NewTimer returns a Timer that fires once after d. A d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d, as time.AfterFunc
	// does; the Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a one-shot timer, like [time.Timer].
type Timer interface {
	// C delivers the time once the timer fires. The channel has a buffer of one
	// and is never closed.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call stopped
	// it, as [time.Timer.Stop] does.
	Stop() bool
}

// Real returns the Clock backed by the time package. It is the default
// everywhere in quorumlock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) Since(t time.Time) time.Duration { return time.Since(t) }
func (realClock) NewTimer(d time.Duration) Timer  { return realTimer{time.NewTimer(d)} }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
