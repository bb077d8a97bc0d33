package quorumlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorumlocktest"
	"github.com/quorumlock/quorumlock/redlock"
)

// nodeErrors returns the *mutex.NodeError values err carries.
func nodeErrors(t *testing.T, err error) []*mutex.NodeError {
	t.Helper()
	var merr *multierror.Error
	require.ErrorAs(t, err, &merr, "%v", err)
	var out []*mutex.NodeError
	for _, e := range merr.Errors {
		var ne *mutex.NodeError
		if errors.As(e, &ne) {
			out = append(out, ne)
		}
	}
	return out
}

func TestMajorityStoppedIsNodesUnavailableAtOnce(t *testing.T) {
	t.Parallel()
	const nodeTimeout = 500 * time.Millisecond
	nodes := quorumlocktest.Start(t, 5)
	rs := nodes.Redlock(redlock.WithNodeTimeout(nodeTimeout))
	for i := range 3 {
		nodes.Stop(i)
	}
	start := time.Now()
	err := rs.NewMutex("order:1").TryLockContext(t.Context())
	elapsed := time.Since(start)
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.Less(t, elapsed, nodeTimeout, "a stopped node refuses at once")
	failed := nodeErrors(t, err)
	require.Len(t, failed, 3)
	for _, ne := range failed {
		assert.NotErrorIs(t, ne, mutex.ErrNodeTimeout, "a refused connection, not a timeout: %v", ne)
	}

	for i := range 3 {
		nodes.Start(i)
	}
	require.NoError(t, rs.NewMutex("order:1").LockContext(within(t, 5*time.Second)))
}

func TestStopKeepsDataAndRestartLosesIt(t *testing.T) {
	t.Parallel()
	nodes := quorumlocktest.Start(t, 3)
	urls := nodes.URLs()
	rs := nodes.Redlock()
	held := rs.NewMutex("report", mutex.WithTTL(time.Minute))
	require.NoError(t, held.LockContext(within(t, 5*time.Second)))
	// It returns at a majority: the third node's acquire, still on its way,
	// could land after that node is restarted below.
	require.Eventually(t, func() bool {
		in, err := rs.Inspect(t.Context(), "report")
		if err != nil || len(in.Locks) != 1 {
			return false
		}
		for _, v := range in.Locks[0].Values {
			if v.Token != held.Value() {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "the key reached every node")

	for i := range 3 {
		nodes.Stop(i)
		nodes.Start(i)
	}
	require.Equal(t, urls, nodes.URLs())
	err := rs.NewMutex("report").TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "the nodes kept the key: held by someone else")

	for i := range 2 {
		nodes.Restart(i)
	}
	require.Equal(t, urls, nodes.URLs())
	require.NoError(t, rs.NewMutex("report").LockContext(within(t, 5*time.Second)), "a majority forgot the key")
	require.ErrorIs(t, held.UnlockContext(t.Context()), mutex.ErrNotHeld)
}

func TestMajorityHungHonoursCtx(t *testing.T) {
	t.Parallel()
	const nodeTimeout = time.Second
	nodes := quorumlocktest.Start(t, 5)
	rs := nodes.Redlock(redlock.WithNodeTimeout(nodeTimeout))
	for i := range 3 {
		nodes.Hang(i)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := rs.NewMutex("order:2").LockContext(ctx)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, elapsed, 600*time.Millisecond, "returned with ctx, not a per-node timeout later")

	// Without a ctx deadline, the hung nodes time out one by one.
	err = rs.NewMutex("order:3").TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	failed := nodeErrors(t, err)
	require.Len(t, failed, 3)
	for _, ne := range failed {
		assert.ErrorIs(t, ne, mutex.ErrNodeTimeout)
	}

	for i := range 3 {
		nodes.Unhang(i)
	}
	// The nodes answer what they held, then the next lock.
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, rs.NewMutex("order:4").LockContext(ctx))
}

// Unhang returns once the node set made by Redlock has read the node's
// answers to what it held, so a TryLockContext right after it counts the
// node. Before, the node set could still be waiting for the round trip the
// hang held, judge the node stalled and fail the call at once with
// ErrNodesUnavailable (every run failed within its 10 rounds, under -race).
func TestALockRightAfterUnhangCountsTheNodes(t *testing.T) {
	t.Parallel()
	nodes := quorumlocktest.Start(t, 5)
	rs := nodes.Redlock(redlock.WithNodeTimeout(200 * time.Millisecond))
	warm := rs.NewMutex("warm") // the scripts loaded: miniredis compiles each slowly under -race
	require.NoError(t, warm.LockContext(within(t, 5*time.Second)))
	require.NoError(t, warm.UnlockContext(t.Context()))
	for round := range 10 {
		for i := range 3 {
			nodes.Hang(i)
		}
		err := rs.NewMutex(fmt.Sprint("hung:", round)).TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		for i := range 3 {
			nodes.Unhang(i)
		}
		m := rs.NewMutex(fmt.Sprint("back:", round))
		require.NoError(t, m.TryLockContext(t.Context()), "round %d", round)
		require.NoError(t, m.UnlockContext(t.Context()))
	}
}

// A command sent to a hung node is held, not lost: it runs at Unhang, as
// on a paused server that resumes.
func TestHangHoldsCommandsUntilUnhang(t *testing.T) {
	t.Parallel()
	nodes := quorumlocktest.Start(t, 1)
	opt, err := redis.ParseURL(nodes.URLs()[0])
	require.NoError(t, err)
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	require.NoError(t, c.Ping(t.Context()).Err())

	opt.ContextTimeoutEnabled = true
	hung := redis.NewClient(opt)
	defer hung.Close()
	require.NoError(t, hung.Ping(t.Context()).Err())

	nodes.Hang(0)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	var timeout net.Error
	require.ErrorAs(t, hung.Set(ctx, "k", "v", 0).Err(), &timeout)
	require.True(t, timeout.Timeout(), "%v", timeout)
	nodes.Unhang(0)
	require.Eventually(t, func() bool { return c.Get(t.Context(), "k").Val() == "v" }, 2*time.Second, 5*time.Millisecond)
}

// Restart is what WithRestartQuarantine detects: the restarted nodes are
// kept out of every majority.
func TestRestartIsSeenByTheQuarantine(t *testing.T) {
	t.Parallel()
	const quarantine = 10 * time.Second
	nodes := quorumlocktest.Start(t, 5)
	nodes.FastForward(quarantine) // up for longer than the quarantine
	rs := nodes.Redlock(redlock.WithRestartQuarantine(quarantine))
	m := rs.NewMutex("ledger", mutex.WithTTL(time.Second))
	require.NoError(t, m.LockContext(within(t, 5*time.Second)), "nodes up longer than the quarantine count")
	require.NoError(t, m.UnlockContext(t.Context()))

	for i := range 3 {
		nodes.Restart(i)
	}
	// A first try may meet a connection the restart closed (EOF), as on
	// Redis; the quarantine follows within a few tries, and no try obtains.
	for try := 1; ; try++ {
		err := m.TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotObtained)
		quarantined := 0
		for _, ne := range nodeErrors(t, err) {
			if errors.Is(ne, mutex.ErrQuarantined) {
				quarantined++
			}
		}
		if quarantined == 3 {
			break
		}
		require.Less(t, try, 10, "the restarted nodes are not quarantined: %v", err)
		time.Sleep(10 * time.Millisecond) // no signal: the client learns on its next command
	}
}

func TestFastForwardPassesTheLockOn(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	nodes := quorumlocktest.Start(t, 5)
	rs := nodes.Redlock()
	first := rs.NewMutex("invoice:9", mutex.WithTTL(ttl))
	require.NoError(t, first.LockContext(within(t, 5*time.Second)))
	second := rs.NewMutex("invoice:9", mutex.WithTTL(ttl))
	require.ErrorIs(t, second.TryLockContext(t.Context()), mutex.ErrNotObtained)

	nodes.FastForward(ttl)
	require.NoError(t, second.LockContext(within(t, 5*time.Second)))
	require.ErrorIs(t, first.UnlockContext(t.Context()), mutex.ErrNotHeld)
	require.NoError(t, second.UnlockContext(t.Context()))
}

func TestBadIndexFailsTheTest(t *testing.T) {
	t.Parallel()
	redistest.SkipMiniredisInFIPSOnly(t) // Start would skip its scope
	for _, fault := range []func(*quorumlocktest.Nodes){
		func(n *quorumlocktest.Nodes) { n.Stop(3) },
		func(n *quorumlocktest.Nodes) { n.Hang(-1) },
		func(n *quorumlocktest.Nodes) { n.Restart(3) },
	} {
		err := inTest(func(t testing.TB) { fault(quorumlocktest.Start(t, 3)) })
		require.ErrorContains(t, err, "there are nodes 0 to 2")
	}
}

// Nodes left hung, with commands held, are released at cleanup: TestMain's
// goleak finds no proxy goroutine left.
func TestCleanupReleasesHungNodes(t *testing.T) {
	t.Parallel()
	nodes := quorumlocktest.Start(t, 3)
	rs := nodes.Redlock()
	for i := range 3 {
		nodes.Hang(i)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, rs.NewMutex("held").LockContext(ctx), context.DeadlineExceeded)
}

// FastForward moves the clock the scripts read (TIME) with the keys' TTLs:
// a reader's hold on a read-write lock is a hash field stamped with its
// expiry on that clock, and expires with its TTL.
func TestFastForwardMovesTheNodesClock(t *testing.T) {
	t.Parallel()
	nodes := quorumlocktest.Start(t, 3)
	rs := nodes.Redlock()
	short := rs.NewRWMutex("doc", mutex.WithTTL(10*time.Second))
	long := rs.NewRWMutex("doc", mutex.WithTTL(time.Minute))
	require.NoError(t, short.RLockContext(within(t, 5*time.Second)))
	require.NoError(t, long.RLockContext(within(t, 5*time.Second)))

	nodes.FastForward(10 * time.Second) // short's hold ends; the hash lives on for long's
	require.NoError(t, long.RUnlockContext(t.Context()))
	w := rs.NewRWMutex("doc")
	require.NoError(t, w.TryLockContext(t.Context()), "no reader left")
	require.ErrorIs(t, short.RUnlockContext(t.Context()), mutex.ErrNotHeld)
}

// Faults may be injected from several goroutines at once (run with -race).
func TestFaultsFromManyGoroutines(t *testing.T) {
	t.Parallel()
	nodes := quorumlocktest.Start(t, 5)
	rs := nodes.Redlock()
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for k := range 20 {
				i := (g + k) % 5
				switch k % 6 {
				case 0:
					nodes.Stop(i)
				case 1:
					nodes.Start(i)
				case 2:
					nodes.Hang(i)
				case 3:
					nodes.Unhang(i)
				case 4:
					nodes.Restart(i)
				case 5:
					nodes.FastForward(time.Millisecond)
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	for i := range 5 {
		nodes.Start(i)
		nodes.Unhang(i)
	}
	require.NoError(t, rs.NewMutex("after").LockContext(within(t, 5*time.Second)))
}
