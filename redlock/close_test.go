package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Close with locks still held (a deferred rs.Close() that runs before a
// job's unlock) releases them on every node, stops their renewals and closes
// their Lost channels with ErrClosed; every later call says the set is
// closed, and sends nothing.
func TestCloseReleasesHeldLocks(t *testing.T) {
	servers := redistest.Start(t, 3)
	for name, open := range openers(servers) {
		t.Run(name, func(t *testing.T) {
			rs := open(t)
			plain := rs.NewMutex("close:plain", mutex.WithTTL(time.Minute))
			renewed := rs.NewMutex("close:renewed", mutex.WithTTL(time.Second), mutex.WithAutoExtend())
			idle := rs.NewMutex("close:idle") // locked and released before Close
			for _, m := range []*mutex.Mutex{plain, renewed, idle} {
				require.NoError(t, m.LockContext(t.Context()))
			}
			require.NoError(t, idle.UnlockContext(t.Context()))
			plainLost := plain.Lost()

			var wg sync.WaitGroup
			for range 3 { // concurrent and repeated calls are safe
				wg.Go(func() { assert.NoError(t, rs.Close()) })
			}
			wg.Wait()
			require.NoError(t, rs.Close())

			for _, s := range servers {
				for _, key := range []string{"close:plain", "close:renewed"} {
					assert.Zero(t, s.Do(t, "EXISTS", key), "%s on %s", key, s.Addr())
				}
			}
			for _, m := range []*mutex.Mutex{plain, renewed} {
				select {
				case <-m.Lost():
				default:
					t.Fatalf("%s: Lost not closed", m.Name())
				}
				require.ErrorIs(t, m.LostCause(), mutex.ErrClosed)
				require.ErrorIs(t, m.LostCause(), mutex.ErrLost)
				assert.True(t, m.Until().IsZero())
			}
			select {
			case <-plainLost:
			default:
				t.Fatal("the channel Lost returned before Close is closed too")
			}
			assert.NoError(t, idle.LostCause(), "released before Close: not lost")

			// A renewal would bring the key back within a third of the TTL.
			time.Sleep(500 * time.Millisecond)
			for _, s := range servers {
				assert.Zero(t, s.Do(t, "EXISTS", "close:renewed"), "renewals stopped")
			}

			err := plain.LockContext(t.Context())
			require.ErrorIs(t, err, mutex.ErrClosed)
			require.ErrorIs(t, err, mutex.ErrNotObtained)
			require.ErrorIs(t, rs.NewMutex("close:new").TryLockContext(t.Context()), mutex.ErrClosed)
			require.ErrorIs(t, plain.UnlockContext(t.Context()), mutex.ErrClosed)
			require.ErrorIs(t, renewed.ExtendContext(t.Context()), mutex.ErrClosed)
			require.ErrorIs(t, rs.Do(t.Context(), "close:do", func(ctx context.Context) error { return nil }), mutex.ErrClosed)
			for _, s := range servers {
				assert.Zero(t, s.Do(t, "EXISTS", "close:new"), "nothing sent after Close")
			}
		})
	}
}

// The clients given to New stay open after Close: they are the caller's.
func TestCloseLeavesTheCallersClientsOpen(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := redistest.Clients(t, servers)
	rs, err := redlock.New(clients)
	require.NoError(t, err)
	require.NoError(t, rs.Close())
	for _, c := range clients {
		require.NoError(t, c.Ping(t.Context()).Err())
	}
}

// A LockContext call waiting for a held lock returns ErrClosed at Close,
// not at its ctx's deadline.
func TestCloseEndsWaitingLockCalls(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.New(redistest.Clients(t, servers))
	require.NoError(t, err)
	holder := rs.NewMutex("close:wait", mutex.WithTTL(time.Hour))
	require.NoError(t, holder.LockContext(t.Context()))
	done := make(chan error, 1)
	go func() {
		done <- rs.NewMutex("close:wait", mutex.WithRetryDelay(time.Hour, time.Hour)).LockContext(t.Context())
	}()
	require.Eventually(t, func() bool { return rs.Waiting("close:wait") == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, rs.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, mutex.ErrClosed)
		require.ErrorIs(t, err, mutex.ErrNotObtained)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting LockContext did not return at Close")
	}
	for _, s := range servers {
		assert.Zero(t, s.Do(t, "EXISTS", "close:wait"), "the holder's lock was released")
	}
}

// Close is bounded by the per-node timeout: a paused node does not hold it
// up, and the others are released.
func TestCloseIsBoundedWithAPausedNode(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""), redlock.WithNodeTimeout(200*time.Millisecond))
	require.NoError(t, err)
	m := rs.NewMutex("close:paused", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	servers[2].Pause()
	t.Cleanup(servers[2].Resume)
	start := time.Now()
	require.NoError(t, rs.Close())
	assert.Less(t, time.Since(start), time.Second)
	for _, s := range servers[:2] {
		assert.Zero(t, s.Do(t, "EXISTS", "close:paused"))
	}
	require.ErrorIs(t, m.LostCause(), mutex.ErrClosed)
}

// Close while Do's fn runs cancels fn's ctx with a cause matching ErrClosed,
// and Do reports it once.
func TestCloseDuringDo(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- rs.Do(t.Context(), "close:do", func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-running
	require.NoError(t, rs.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, mutex.ErrClosed)
		require.ErrorIs(t, err, mutex.ErrLost)
		assert.Equal(t, 1, strings.Count(err.Error(), "node set was closed"), err.Error())
	case <-time.After(10 * time.Second):
		t.Fatal("Do did not return after Close")
	}
	for _, s := range servers {
		assert.Zero(t, s.Do(t, "EXISTS", "close:do"))
	}
}

// A release that a majority confirmed still reaches the nodes that were slow
// to answer when Close follows at once (a deferred rs.Close() after
// UnlockContext, as in quorumlock run): Close lets the commands on their way
// finish, within the per-node timeout, before it closes the clients, so no
// key is left on those nodes until its TTL.
func TestCloseLetsAConfirmedReleaseReachASlowNode(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""), redlock.WithNodeTimeout(10*time.Second))
	require.NoError(t, err)
	m := rs.NewMutex("close:tail", mutex.WithTTL(time.Minute))
	servers[2].Pause()
	t.Cleanup(servers[2].Resume)
	require.NoError(t, m.LockContext(t.Context()), "nodes 0 and 1 are a majority")
	require.NoError(t, m.UnlockContext(t.Context()), "confirmed by nodes 0 and 1; node 2's release waits behind its acquire")
	servers[2].Resume()
	require.NoError(t, rs.Close())
	assert.Zero(t, servers[2].Do(t, "EXISTS", "close:tail"), "the release never reached the node that was slow")
}

// Close takes at most the per-node timeout (WithNodeTimeout, else 200ms for
// the default TTL), however many nodes hang, with locks still held and
// earlier releases, cut short by their ctx, still queued for the hung
// nodes. It used to wait twice the timeout: the releases, then the queue.
func TestCloseTakesAtMostThePerNodeTimeoutWhileNodesHang(t *testing.T) {
	const slack = 250 * time.Millisecond // a busy machine
	servers := redistest.Start(t, 5)
	for _, c := range []struct {
		timeout time.Duration // 0: the default
		paused  int
	}{{0, 3}, {500 * time.Millisecond, 1}, {500 * time.Millisecond, 3}} {
		t.Run(fmt.Sprintf("timeout %v/%d paused", c.timeout, c.paused), func(t *testing.T) {
			var opts []redlock.Option
			bound := 200 * time.Millisecond
			if c.timeout > 0 {
				opts, bound = append(opts, redlock.WithNodeTimeout(c.timeout)), c.timeout
			}
			rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""), opts...)
			require.NoError(t, err)
			name := fmt.Sprintf("close:hang:%v:%d", c.timeout, c.paused)
			held := rs.NewMutex(name+":held", mutex.WithTTL(10*time.Second)) // the default's per-node timeout
			earlier := rs.NewMutex(name+":earlier", mutex.WithTTL(10*time.Second))
			require.NoError(t, held.LockContext(t.Context()))
			require.NoError(t, earlier.LockContext(t.Context()))
			for _, s := range servers[5-c.paused:] {
				s.Pause()
				t.Cleanup(s.Resume)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			_ = earlier.UnlockContext(ctx) // its release to the paused nodes stays queued
			cancel()
			start := time.Now()
			require.NoError(t, rs.Close())
			assert.Less(t, time.Since(start), bound+slack)
			for _, s := range servers[:5-c.paused] {
				assert.Zero(t, s.Do(t, "EXISTS", held.Name()), s.Addr())
			}
			require.ErrorIs(t, held.LostCause(), mutex.ErrClosed)
			for _, s := range servers[5-c.paused:] {
				s.Resume()
			}
		})
	}
}

// Close while hundreds of lock calls are in progress (winning, rolling
// back, queued) leaves no lock key and no queue place behind on any node:
// the calls' rollbacks and departures leave before the clients it made
// close. (A review: keys on 3 to 5 of 5 nodes for their whole TTL, 5s, in
// up to half the runs, and places that held others back for 1.2s.)
func TestCloseDuringLockCallsLeavesNothing(t *testing.T) {
	servers := redistest.Start(t, 5)
	names := []string{"cr:a", "cr:b", "cr:c", "cr:d", "cr:e", "cr:f", "cr:g"}
	for run := range 4 {
		rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
		require.NoError(t, err)
		var obtained atomic.Int32
		enough := make(chan struct{})
		closeAt := int32(20 + 40*run) // after that many acquisitions
		var wg sync.WaitGroup
		for g := range 200 {
			wg.Go(func() {
				for i := g; ; i++ {
					var m *mutex.Mutex
					if g%2 == 0 {
						m = rs.NewMultiMutex([]string{names[i%7], names[(i+3)%7]}, mutex.WithTTL(5*time.Second), mutex.WithFencing())
					} else {
						m = rs.NewMutex(names[i%7], mutex.WithTTL(5*time.Second), mutex.WithFencing())
					}
					if m.LockContext(t.Context()) != nil {
						return // closed
					}
					if obtained.Add(1) == closeAt {
						close(enough)
					}
					_ = m.UnlockContext(t.Context())
				}
			})
		}
		<-enough
		require.NoError(t, rs.Close())
		wg.Wait()
		for _, s := range servers {
			for _, name := range names {
				assert.Zero(t, s.Do(t, "EXISTS", name), "run %d: lock key %s on %s", run, name, s.Addr())
				assert.Zero(t, s.Do(t, "ZCARD", name+":quorumlock:q"), "run %d: places in %s's queue on %s", run, name, s.Addr())
			}
		}
	}
}

// Close while attempts wait for a hung majority (a 1-minute TTL's per-node
// timeout is 500ms, which bounds Close too, since the paused nodes never
// answer the commands on their way): they stop waiting and roll back at
// once, so the nodes that granted them keep no key. (A review:
// 2 to 30 keys left on the 2 nodes of 5 that answered, for their TTL, in 3
// of 4 runs: the rollbacks were sent after the clients closed.)
func TestCloseStopsAttemptsWaitingForAHungMajority(t *testing.T) {
	servers := redistest.Start(t, 5)
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	for _, s := range servers[:3] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			err := rs.NewMutex(fmt.Sprint("hung:", i), mutex.WithTTL(time.Minute)).TryLockContext(t.Context())
			assert.ErrorIs(t, err, mutex.ErrNotObtained)
		})
	}
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range servers[3:] {
			for i := range 10 {
				n += int(s.Do(t, "EXISTS", fmt.Sprint("hung:", i)).(int64))
			}
		}
		return n == 20
	}, 5*time.Second, time.Millisecond, "every attempt granted by the two nodes that answer, and waiting for the others")
	start := time.Now()
	require.NoError(t, rs.Close())
	assert.Less(t, time.Since(start), 500*time.Millisecond+250*time.Millisecond) // slack: a busy machine
	wg.Wait()
	for _, s := range servers[3:] {
		for i := range 10 {
			assert.Zero(t, s.Do(t, "EXISTS", fmt.Sprint("hung:", i)), "hung:%d on %s", i, s.Addr())
		}
	}
}

// Close gives the releases the per-node timeout of the locks held when it is
// larger than the default TTL's (a 60s TTL's is 500ms, the default's
// 200ms), as its doc says: two of three nodes paused for 300ms answer the
// release of a 60s lock before Close returns. Close used the default
// TTL's alone, returned at 200ms and dropped the release (review 33).
func TestCloseWaitsTheLargestPerNodeTimeoutOfTheLocksHeld(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	held := rs.NewMutex("close:long", mutex.WithTTL(time.Minute))
	require.NoError(t, held.LockContext(t.Context()))
	for _, s := range servers[1:] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	var resumed atomic.Bool
	resume := time.AfterFunc(300*time.Millisecond, func() {
		for _, s := range servers[1:] {
			s.Resume()
		}
		resumed.Store(true)
	})
	defer resume.Stop()
	require.NoError(t, rs.Close())
	assert.True(t, resumed.Load(), "Close returned before the paused nodes could answer, within its 500ms")
	for _, s := range servers {
		assert.Zero(t, s.Do(t, "EXISTS", held.Name()), "%s: released", s.Addr())
	}
}

// The same for a lock call under way when Close comes: its attempt,
// granted by one node and waiting for two paused for 300ms, is rolled back
// on them within the 60s TTL's per-node timeout (500ms), not abandoned at
// the default's (200ms) with its keys left on them for the rest of the TTL
// (review 36, 4 of 4 runs).
func TestCloseWaitsTheLargestPerNodeTimeoutOfTheCallsUnderWay(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	warm := rs.NewMutex("close:warm")
	require.NoError(t, warm.LockContext(t.Context()))
	require.NoError(t, warm.UnlockContext(t.Context()))
	for _, s := range servers[1:] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	m := rs.NewMutex("close:inflight", mutex.WithTTL(time.Minute))
	locked := make(chan error, 1)
	go func() { locked <- m.LockContext(t.Context()) }()
	require.Eventually(t, func() bool { return servers[0].Do(t, "EXISTS", m.Name()) == int64(1) },
		5*time.Second, time.Millisecond, "the attempt reached the node that answers")
	resume := time.AfterFunc(300*time.Millisecond, func() {
		for _, s := range servers[1:] {
			s.Resume()
		}
	})
	defer resume.Stop()
	require.NoError(t, rs.Close())
	require.ErrorIs(t, <-locked, mutex.ErrClosed)
	for _, s := range servers {
		assert.Zero(t, s.Do(t, "EXISTS", m.Name()), "%s: rolled back", s.Addr())
	}
}
