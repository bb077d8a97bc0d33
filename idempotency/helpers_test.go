package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestMain checks for leaked goroutines, except go-redis's probe of a node
// it could not dial (a killed one), which outlives Close by up to a second:
// a run of only the tests that kill nodes ends within it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// nodeTimeout is generous: the machine running the tests may be busy.
const nodeTimeout = 500 * time.Millisecond

// newRedlock returns a Redlock over its own clients of servers, as another
// process would have, closed at t's cleanup.
func newRedlock(t testing.TB, servers []*redistest.Server, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		// One dial: a command to a down node fails at once, instead of after
		// 0.5s of redials that a restart of the node could meet.
		clients[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries = -1; o.DialTimeout = time.Second; o.DialerRetries = 1 })
	}
	rs, err := redlock.New(clients, append([]redlock.Option{redlock.WithNodeTimeout(nodeTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

// counted is work that counts its runs and answers resp.
type counted struct {
	runs atomic.Int32
	resp string
}

func (c *counted) fn(context.Context) ([]byte, error) {
	c.runs.Add(1)
	return []byte(c.resp), nil
}

// do calls s.Do with a bounded ctx.
func do(t testing.TB, s *idempotency.Store, key, request string, fn func(context.Context) ([]byte, error)) ([]byte, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.Do(ctx, key, []byte(request), fn)
}

// requireRuns checks that a call of Do ran the work (not replayed, no error) and answered want.
func requireRuns(t testing.TB, s *idempotency.Store, key, request string, c *counted) {
	t.Helper()
	before := c.runs.Load()
	resp, replayed, err := do(t, s, key, request, c.fn)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, c.resp, string(resp))
	require.Equal(t, before+1, c.runs.Load(), "the work ran once")
}

// requireReplays checks that a call of Do answered want, replayed, without running its work.
func requireReplays(t testing.TB, s *idempotency.Store, key, request, want string) {
	t.Helper()
	resp, replayed, err := do(t, s, key, request, func(context.Context) ([]byte, error) {
		return nil, errors.New("the work ran again")
	})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, want, string(resp))
}

// recordKey is the record of key on the nodes, with the default prefixes.
func recordKey(key string) string { return "idempotency:" + key + ":quorumlock:idem" }

// recordsOn returns how many of servers hold key's record.
func recordsOn(t testing.TB, servers []*redistest.Server, key string) int {
	t.Helper()
	n := 0
	for _, s := range servers {
		if s.Do(t, "EXISTS", recordKey(key)).(int64) == 1 {
			n++
		}
	}
	return n
}
