package quorumlocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorumlocktest"
	"github.com/quorumlock/quorumlock/redlock"
)

// cluster is n nodes, either the kit's or real redis-server processes, with
// the faults both have. The contract tests run the same body on both, to
// show that the kit agrees with Redis on what the library relies on.
type cluster struct {
	urls    []string
	stop    func(i int) // fails connections at once: Stop / SIGKILL
	hang    func(i int) // answers nothing: Hang / SIGSTOP
	unhang  func(i int)
	restart func(i int) // back empty: Restart / RestartEmpty
}

// set returns a node set on c, closed at t's cleanup.
func (c *cluster) set(t *testing.T, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	rs, err := redlock.NewFromURLs(context.Background(), c.urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

// onKitAndRedis runs fn on n kit nodes and on n redis-server processes
// (skipped, or failed under REDLOCK_REQUIRE_REDIS=1, without redis-server).
func onKitAndRedis(t *testing.T, n int, fn func(t *testing.T, c *cluster)) {
	t.Run("kit", func(t *testing.T) {
		t.Parallel()
		nodes := quorumlocktest.Start(t, n)
		fn(t, &cluster{urls: nodes.URLs(), stop: nodes.Stop, hang: nodes.Hang, unhang: nodes.Unhang, restart: nodes.Restart})
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		servers := redistest.Start(t, n)
		c := &cluster{}
		for _, s := range servers {
			c.urls = append(c.urls, "redis://"+s.Addr())
		}
		c.stop = func(i int) { servers[i].Kill() }
		c.hang = func(i int) { servers[i].Pause() }
		c.unhang = func(i int) { servers[i].Resume() }
		c.restart = func(i int) { servers[i].RestartEmpty() }
		fn(t, c)
	})
}

// within returns a ctx that ends after d, or with t.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// heldOnEveryNode waits until every node holds m's token: an acquisition
// returns once a majority granted it, and the grants of the other nodes may
// still be on their way (late, they could land on a node after the test
// restarted it, and keep the lease alive as on Redis).
func heldOnEveryNode(t *testing.T, rs *redlock.Redlock, m *mutex.Mutex) {
	t.Helper()
	require.Eventually(t, func() bool {
		in, err := rs.Inspect(t.Context(), m.Name())
		if err != nil || len(in.Locks) == 0 {
			return false
		}
		for _, v := range in.Locks[0].Values {
			if v.Token != m.Value() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}
