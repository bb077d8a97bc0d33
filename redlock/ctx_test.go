package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The set's calls return once their ctx ends whatever the nodes do: here a
// majority of five is paused (SIGSTOP), and the per-node timeout (1s)
// outlasts every ctx. Within 250ms of the ctx's end, generous for a busy
// machine and far from the per-node timeout the calls used to wait for. What
// must still reach the nodes goes on in the background: once the nodes are
// back and it is done, no lock key is left.
func TestAdminCallsAndDoReturnWhenCtxEndsWithAPausedMajority(t *testing.T) {
	const slack = 250 * time.Millisecond
	servers := redistest.Start(t, 5)
	paused := []*redistest.Server{servers[0], servers[1], servers[4]}
	pause := func(t *testing.T) (resume func()) {
		resume = func() {
			for _, s := range paused {
				s.Resume()
			}
		}
		t.Cleanup(resume)
		for _, s := range paused {
			s.Pause()
		}
		return resume
	}
	type call = func(context.Context) error
	// Each case starts with every node up and returns the call to time.
	cases := []struct {
		name  string
		start func(t *testing.T, rs *redlock.Redlock, name string) call
	}{
		{"Do/acquiring", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error {
				err := rs.Do(ctx, name, func(context.Context) error { return nil })
				require.ErrorIs(t, err, mutex.ErrNotObtained)
				return err
			}
		}},
		{"Do/releasing", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error {
				return rs.Do(ctx, name, func(ctx context.Context) error {
					pause(t) // while fn holds the lock; resumed below
					<-ctx.Done()
					return nil // the release's error tells that ctx ended
				})
			}
		}},
		{"Inspect", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error { _, err := rs.Inspect(ctx, name); return err }
		}},
		{"ForceUnlock", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error { _, err := rs.ForceUnlock(ctx, name); return err }
		}},
		{"Check", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error { _, err := rs.Check(ctx); return err }
		}},
	}
	for k, c := range cases {
		for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v", c.name, d), func(t *testing.T) {
				rs := doSet(t, servers)
				t.Cleanup(func() { require.NoError(t, rs.Close()) })
				name := fmt.Sprintf("ctx-%d-%v", k, d)
				call := c.start(t, rs, name)
				if !strings.HasPrefix(c.name, "Do/releasing") {
					pause(t)
				}
				ctx, cancel := context.WithTimeout(t.Context(), d)
				defer cancel()
				start := time.Now()
				err := call(ctx)
				took := time.Since(start)
				require.Less(t, took, d+slack, "returned %v after a ctx of %v (%v)", took, d, err)
				require.ErrorIs(t, err, context.DeadlineExceeded)

				for _, s := range paused {
					s.Resume()
				}
				rs.Settle()
				for i, s := range servers {
					keys, _ := s.Do(t, "KEYS", name+"*").([]any)
					for _, key := range keys {
						assert.True(t, strings.Contains(key.(string), ":quorumlock:rel:"), "%s left on node %d", key, i)
					}
				}
			})
		}
	}
}

// With one node hung and a ctx shorter than the per-node timeout, Inspect
// reports what the four healthy nodes answered and names only the hung node
// as failed; it used to discard their answers ("0 of 5 nodes answered"),
// its second step starting after the first had waited out ctx for the hung
// node. ForceUnlock, which must read every counter before it raises one,
// says it read four and that ctx ended before the raise: nothing removed,
// no healthy node blamed. Given the per-node timeout, it removes the locks.
func TestInspectAndForceUnlockWithAHungNodeAndAShortCtx(t *testing.T) {
	servers := redistest.Start(t, 5)
	holders := doSet(t, servers)
	var err error
	var admin, unlocker *redlock.Redlock // two sets: each finds the hung node stalled after one per-node timeout
	for _, rs := range []**redlock.Redlock{&admin, &unlocker} {
		*rs, err = redlock.NewFromURLs(t.Context(), urlsOf(servers, "")) // 200ms per node
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, (*rs).Close()) })
	}
	m := holders.NewMutex("hang:m", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	_, err = holders.NewSemaphore("hang:s", 3, mutex.WithTTL(time.Minute)).AcquireContext(t.Context())
	require.NoError(t, err)
	holders.Settle() // every node took the keys
	hung := servers[4]
	hung.Pause()
	t.Cleanup(hung.Resume)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	onlyHungFailed := func(t *testing.T, nodes []redlock.NodeState) {
		t.Helper()
		for i, n := range nodes[:4] {
			assert.NoError(t, n.Err, "node %d", i)
		}
		var nodeErr *mutex.NodeError
		require.ErrorAs(t, nodes[4].Err, &nodeErr)
		assert.Contains(t, nodeErr.Node, hung.Addr())
	}
	ev, err := unlocker.ForceUnlock(short(), "hang:m")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "no node but the hung one failed")
	assert.Contains(t, err.Error(), "fencing counter read on 4 of 5 nodes, but ctx ended before it was raised; nothing removed")
	onlyHungFailed(t, ev.Nodes)
	assert.Zero(t, ev.Fence)
	for _, s := range servers[:4] {
		assert.Equal(t, int64(1), s.Do(t, "EXISTS", "hang:m"), s.Addr())
	}

	var keys []string // the lock keys Inspect found
	// The permits first, while the set does not yet know the hung node stalled.
	for _, name := range []string{"hang:s", "hang:m"} {
		in, err := admin.Inspect(short(), name)
		require.NoError(t, err, "%s", in)
		onlyHungFailed(t, in.Nodes)
		require.Len(t, in.Locks, 1, "%s", in)
		token := servers[0].Do(t, "GET", in.Locks[0].Key) // the Mutex's, the permit's
		assert.Equal(t, token, in.Locks[0].Holder)
		keys = append(keys, in.Locks[0].Key)
		for i, v := range in.Locks[0].Values[:4] {
			assert.Equal(t, token, v.Token, "node %d", i)
		}
		assert.Error(t, in.Locks[0].Values[4].Err)
	}

	for _, name := range []string{"hang:m", "hang:s"} {
		ev, err = unlocker.ForceUnlock(t.Context(), name)
		require.NoError(t, err, "%s", ev)
		onlyHungFailed(t, ev.Nodes)
		assert.NotEmpty(t, ev.Removed)
	}
	for _, s := range servers[:4] {
		for _, key := range keys {
			assert.Zero(t, s.Do(t, "EXISTS", key), "%s on %s", key, s.Addr())
		}
	}
}

// A ctx that ended before a call sent anything is ctx's error, saying
// nothing was sent: no node failed, so no *mutex.NodeError, no "N of 3
// nodes failed", no ErrNodesUnavailable; and the nodes run no script. (The
// operator's calls, Leader and idempotency's lookup used to send each
// command and then withdraw it, reporting every node as failed with ctx's
// error.)
func TestCallsWithAnEndedCtxSendNothing(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs := doSet(t, servers)
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	held := rs.NewMutex("held")
	require.NoError(t, held.LockContext(t.Context())) // the clients are connected
	rs.Settle()                                       // the last node's acquire has run too
	before := nodeState(t, servers)

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancelExpired := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancelExpired()
	calls := map[string]func(context.Context) error{
		"Leader":      func(ctx context.Context) error { _, err := rs.NewElection("held").Leader(ctx); return err },
		"Inspect":     func(ctx context.Context) error { _, err := rs.Inspect(ctx, "held"); return err },
		"ForceUnlock": func(ctx context.Context) error { _, err := rs.ForceUnlock(ctx, "held"); return err },
		"idempotency.Do": func(ctx context.Context) error {
			_, _, err := idempotency.New(rs).Do(ctx, "k", nil, func(context.Context) ([]byte, error) { return nil, nil })
			return err
		},
	}
	for name, call := range calls {
		for _, ctx := range []context.Context{cancelled, expired} {
			err := call(ctx)
			require.ErrorIs(t, err, ctx.Err(), name)
			require.ErrorContains(t, err, "nothing sent", name)
			require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, name)
			var nodeErr *mutex.NodeError
			require.False(t, errors.As(err, &nodeErr), "%s: no node failed: %v", name, err)
		}
	}
	require.Equal(t, before, nodeState(t, servers), "nothing sent")
	require.NoError(t, held.UnlockContext(t.Context()))
}
