package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A service must start during the outage the lock exists to survive: a node
// down is no construction error, and locking works on the other two.
func TestNewFromURLsWithANodeDown(t *testing.T) {
	servers := redistest.Start(t, 3)
	servers[1].Kill()
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	m := rs.NewMutex("startup:one-down")
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
}

// Redis started after the service: every node down at construction is no
// error either, and locks work as soon as the nodes are up.
func TestNewFromURLsWithAllNodesDown(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, s := range servers {
		s.Kill()
	}
	rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	m := rs.NewMutex("startup:all-down")
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrNodesUnavailable)
	for _, s := range servers {
		s.Restart()
	}
	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, m.ExtendContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
}

// One server under two names, not reachable at construction: found when the
// nodes first answer. Both of its URLs are refused from then on with a
// *mutex.NodeError matching ErrInvalid that names the two, so the server
// never casts two votes (in the round that finds it, the second name is
// refused before it sends anything), and with three URLs no lock can be taken
// until the URLs are fixed.
func TestNewFromURLsFindsOneServerUnderTwoNamesLater(t *testing.T) {
	servers := redistest.Start(t, 2)
	for _, s := range servers {
		s.Kill()
	}
	urls := []string{
		"redis://" + servers[0].Addr(),
		fmt.Sprintf("redis://localhost:%d", servers[0].Port()),
		"redis://" + servers[1].Addr(),
	}
	rs, err := redlock.NewFromURLs(t.Context(), urls)
	require.NoError(t, err, "nothing answered: nothing to tell yet")
	t.Cleanup(func() { require.NoError(t, rs.Close()) })
	for _, s := range servers {
		s.Restart()
	}
	found := false
	for range 10 { // the first round may be won by one name and the other server
		m := rs.NewMutex("startup:alias")
		err = m.TryLockContext(t.Context())
		if err == nil {
			// Won in the round that found the alias: the shared server voted
			// once, under the name that connected first. Its release may be
			// refused now; the key expires with its TTL.
			_ = m.UnlockContext(t.Context())
			continue
		}
		if invalidOn(err, urls[0]) && invalidOn(err, urls[1]) {
			found = true
			break
		}
	}
	require.True(t, found, "both names refused: %v", err)
	require.ErrorIs(t, err, mutex.ErrInvalid)
	assert.ErrorContains(t, err, "are the same redis-server")
	for range 3 {
		err := rs.NewMutex("startup:alias").TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrInvalid, "refused for good")
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	}
	rep, err := rs.Check(t.Context())
	require.NoError(t, err)
	aliased := 0
	for _, f := range rep.Findings {
		if f.Severity == redlock.Unfit && strings.Contains(f.Message, "same redis-server") {
			aliased++
			assert.NotContains(t, f.Message, "unreachable", "the server answers; its URLs are at fault (review 35)")
		}
	}
	assert.Positive(t, aliased, "Check names the alias: %v", rep)
}

// invalidOn reports whether err holds a *mutex.NodeError for node matching
// ErrInvalid.
func invalidOn(err error, node string) bool {
	var merr *multierror.Error
	if !errors.As(err, &merr) {
		return false
	}
	for _, e := range merr.Errors {
		var ne *mutex.NodeError
		if errors.As(e, &ne) && ne.Node == node && errors.Is(ne, mutex.ErrInvalid) {
			return true
		}
	}
	return false
}

// NewFromURLs returns no later than its ctx ends, and, without a deadline,
// after at most the per-node timeout, however many nodes hang: a node that
// slow fails the lock calls anyway. The healthy nodes lock at once; Close
// ends the pings still waiting on the paused nodes (goleak).
func TestNewFromURLsReturnsWhileNodesHang(t *testing.T) {
	const slack = 250 * time.Millisecond // a busy machine; the old code took 1s
	servers := redistest.Start(t, 5)
	for _, paused := range []int{1, 3} {
		for _, deadline := range []time.Duration{100 * time.Millisecond, 0} {
			t.Run(fmt.Sprintf("%d paused/ctx %v", paused, deadline), func(t *testing.T) {
				for _, s := range servers[5-paused:] {
					s.Pause()
					t.Cleanup(s.Resume)
				}
				baseline := goleak.IgnoreCurrent()
				ctx, bound := t.Context(), 200*time.Millisecond // the default per-node timeout
				if deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, deadline)
					defer cancel()
					bound = deadline
				}
				start := time.Now()
				rs, err := redlock.NewFromURLs(ctx, urlsOf(servers, ""))
				require.NoError(t, err)
				assert.Less(t, time.Since(start), bound+slack)
				if paused == 1 {
					m := rs.NewMutex(fmt.Sprintf("startup:hang:%v", deadline), mutex.WithTTL(time.Minute))
					start = time.Now()
					require.NoError(t, m.LockContext(t.Context()))
					assert.Less(t, time.Since(start), slack)
					for _, s := range servers[:4] { // LockContext returned at a majority: the fourth SET may still be on its way
						assert.Eventually(t, func() bool { return s.Do(t, "EXISTS", m.Name()) == int64(1) }, 2*time.Second, time.Millisecond, s.Addr())
					}
				}
				require.NoError(t, rs.Close())
				goleak.VerifyNone(t, baseline)
			})
		}
	}
}
