package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a Clock that moves only when [Fake.Advance] is called, for
// deterministic tests of timing: a test advances past a deadline instead of
// sleeping until it. [Fake.BlockUntil] waits for the code under test to arm its
// timers, so the test advances only once they exist.
//
// The zero value is not usable; call [NewFake]. A Fake is safe for concurrent
// use. It carries no monotonic reading; Since and Sub use its own time.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever the set of timers changes
}

// NewFake returns a Fake whose time starts at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the Fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns f.Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTimer returns a timer that fires when the Fake has been advanced by d. A
// d <= 0 fires at once.
func (f *Fake) NewTimer(d time.Duration) Timer { return f.arm(d, nil) }

// AfterFunc calls fn in its own goroutine once the Fake has been advanced by
// d (at once for d <= 0).
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer { return f.arm(d, fn) }

func (f *Fake) arm(d time.Duration, fn func()) *fakeTimer {
	t := &fakeTimer{f: f, fn: fn}
	if fn == nil {
		t.c = make(chan time.Time, 1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t.at = f.now.Add(d)
	if d <= 0 {
		t.fire(f.now)
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	return t
}

// Advance moves the Fake's time forward by d and fires, in order, every timer
// whose time has come. It does not wait for the code that receives from the
// timers.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.at.After(f.now) {
			kept = append(kept, t)
			continue
		}
		t.fire(t.at)
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.notifyLocked()
}

// Timers returns the number of timers armed and not yet fired or stopped.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// BlockUntil blocks until at least n timers are armed, or ctx is done, in
// which case it returns ctx.Err().
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		armed, changed := len(f.timers), f.changed
		f.mu.Unlock()
		if armed >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time // nil for AfterFunc
	fn func()
}

func (t *fakeTimer) fire(at time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	t.c <- at
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			f.notifyLocked()
			return true
		}
	}
	return false
}
