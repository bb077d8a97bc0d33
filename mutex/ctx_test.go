package mutex_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// ctxSlack is how long after its ctx ended a blocking call may return on a
// busy 2-core CI machine running other packages' tests under -race: a call
// typically returns within a few milliseconds, and the calls used to wait a
// per-node timeout of these tests (1s) more, which this bound still catches.
const ctxSlack = 250 * time.Millisecond

// ctxDeadlines are the ctx deadlines every call is tried with.
var ctxDeadlines = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond}

// pauseMajority pauses 3 of b's 5 nodes (SIGSTOP: connections are accepted,
// nothing is answered) and returns what resumes them, also run at cleanup.
func pauseMajority(t *testing.T, b *backend) (resume func()) {
	t.Helper()
	resume = func() {
		for _, i := range []int{0, 1, 4} {
			b.real[i].Resume()
		}
	}
	t.Cleanup(resume)
	for _, i := range []int{0, 1, 4} {
		b.real[i].Pause()
	}
	return resume
}

// byDeadline runs call with a ctx that ends after d, and fails the test
// unless call returned within ctxSlack of that with an error matching ctx's.
func byDeadline(t *testing.T, d time.Duration, call func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	took := time.Since(start)
	t.Logf("returned %v after its ctx ended", took-d)
	require.Less(t, took, d+ctxSlack, "returned %v after a ctx of %v (%v)", took, d, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	return err
}

// leftovers returns the keys on b's nodes whose names start with prefix,
// but the tombstones of releases and a semaphore's limit record, which block
// no one and expire on their own within a TTL.
func leftovers(t *testing.T, b *backend, prefix string) []string {
	t.Helper()
	var left []string
	for i, c := range b.admin {
		keys, err := c.Keys(t.Context(), prefix+"*").Result()
		require.NoError(t, err)
		for _, k := range keys {
			if !strings.Contains(k, ":quorumlock:rel:") && !strings.HasSuffix(k, ":quorumlock:limit") {
				left = append(left, fmt.Sprintf("%s on node %d", k, i))
			}
		}
	}
	return left
}

// Every blocking call returns once its ctx ends, whatever the nodes do:
// here a majority is paused, and the per-node timeout (1s) outlasts every
// ctx. What must still reach the nodes (the rollback of an attempt, a
// waiter's leaving the queues, a release) goes on in the background: once
// the nodes are back and it is done, nothing is left on them.
func TestCallsReturnWhenCtxEndsWithAPausedMajority(t *testing.T) {
	b := realBackend(t, 5)
	type call = func(context.Context) error
	type starter = func(t *testing.T, rs *redlock.Redlock, name string) (call, func())
	// Each case starts with every node up; start returns the call to time and
	// what to release once the nodes are back (nil: nothing).
	cases := []struct {
		name     string
		start    starter
		acquires bool // the error matches ErrNotObtained too
		// queued: the nodes are paused once the call waits in the queue of
		// the lock named name + queue, not before the call.
		queued bool
		queue  string
		opts   []redlock.Option
	}{
		{name: "Mutex.LockContext/free", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			return rs.NewMutex(name).LockContext, nil
		}},
		{name: "Mutex.LockContext/held", acquires: true, start: held},
		// Queued on the nodes: the holder, of the same Redlock, must not pass it in the process.
		{name: "Mutex.LockContext/queued", acquires: true, queued: true, start: held, opts: []redlock.Option{redlock.WithoutLocalHandoff()}},
		{name: "Mutex.LockContext/quarantine", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			m := rs.NewMutex(name, mutex.WithTTL(time.Second))
			require.NoError(t, m.LockContext(t.Context())) // the set has met the nodes
			require.NoError(t, m.UnlockContext(t.Context()))
			return m.LockContext, nil
		}, opts: []redlock.Option{redlock.WithRestartQuarantine(time.Second)}},
		{name: "Mutex.TryLockContext", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			return rs.NewMutex(name, mutex.WithFencing()).TryLockContext, nil
		}},
		{name: "Mutex.ExtendContext", start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			m := rs.NewMutex(name)
			require.NoError(t, m.LockContext(t.Context()))
			return m.ExtendContext, func() { require.NoError(t, m.UnlockContext(t.Context())) }
		}},
		{name: "Mutex.UnlockContext", start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			m := rs.NewMutex(name)
			require.NoError(t, m.LockContext(t.Context()))
			// The Mutex keeps the acquisition: a retry confirms the release.
			return m.UnlockContext, func() { require.NoError(t, m.UnlockContext(t.Context())) }
		}},
		{name: "MultiMutex.LockContext", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			return rs.NewMultiMutex([]string{name + ":a", name + ":b"}).LockContext, nil
		}},
		{name: "Semaphore.AcquireContext/free", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			s := rs.NewSemaphore(name, 2)
			return func(ctx context.Context) error { _, err := s.AcquireContext(ctx); return err }, nil
		}},
		{name: "Semaphore.AcquireContext/queued", acquires: true, queued: true, queue: ":quorumlock:permit:0", start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			s := rs.NewSemaphore(name, 1)
			p, err := s.TryAcquireContext(t.Context())
			require.NoError(t, err)
			return func(ctx context.Context) error { _, err := s.AcquireContext(ctx); return err },
				func() { require.NoError(t, p.ReleaseContext(t.Context())) }
		}},
		{name: "RWMutex.RLockContext", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			return rs.NewRWMutex(name).RLockContext, nil
		}},
		{name: "RWMutex.LockContext/read-held", acquires: true, start: func(t *testing.T, rs *redlock.Redlock, name string) (call, func()) {
			reader := rs.NewRWMutex(name)
			require.NoError(t, reader.RLockContext(t.Context()))
			return rs.NewRWMutex(name).LockContext, func() { require.NoError(t, reader.RUnlockContext(t.Context())) }
		}},
	}
	for k, c := range cases {
		for _, d := range ctxDeadlines {
			t.Run(fmt.Sprintf("%s/%v", c.name, d), func(t *testing.T) {
				rs := b.set(t, c.opts...)
				name := fmt.Sprintf("ctx-%d-%v", k, d)
				call, release := c.start(t, rs, name)
				resume := func() {}
				pause := func() { resume = pauseMajority(t, b) }
				if !c.queued {
					pause()
				}
				err := byDeadline(t, d, func(ctx context.Context) error {
					if !c.queued {
						return call(ctx)
					}
					got := make(chan error, 1)
					go func() { got <- call(ctx) }()
					require.Eventually(t, func() bool { return rs.Waiting(name+c.queue) == 1 }, d*3/4, time.Millisecond, "queued")
					pause()
					return <-got
				})
				if c.acquires {
					require.ErrorIs(t, err, mutex.ErrNotObtained)
				}
				resume()
				settle := rs.NewMutex(name, mutex.WithTTL(time.Second)) // valid with every case's options
				settle.Settle()                                         // the rollbacks and releases left in the background are done
				if release != nil {
					release()
					settle.Settle()
				}
				assert.Empty(t, leftovers(t, b, name))
			})
		}
	}
}

// held takes the lock on name with another Mutex of rs and returns a
// LockContext on it, and the holder's unlock.
func held(t *testing.T, rs *redlock.Redlock, name string) (func(context.Context) error, func()) {
	holder := rs.NewMutex(name)
	require.NoError(t, holder.LockContext(t.Context()))
	return rs.NewMutex(name).LockContext, func() { require.NoError(t, holder.UnlockContext(t.Context())) }
}
