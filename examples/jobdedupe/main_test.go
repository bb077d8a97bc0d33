package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/examples/internal/demotest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorumlocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for a signal; none is expected to take more than a
// fraction of it.
const wait = 10 * time.Second

// TestRun runs the program as `go run ./examples/jobdedupe -nodes ...` does,
// on 5 in-process nodes (quorumlocktest) and on 3 real redis-servers; run fails unless
// exactly one replica ran each tick, to its end, past its TTL.
func TestRun(t *testing.T) {
	for name, nodes := range demotest.Backends() {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, run(t.Context(), t.Output(), strings.Join(nodes(t), ",")))
		})
	}
}

// TestOneReplicaPerTickAndTheLockOutlivesItsTTL runs two ticks on three
// replicas. In each, exactly one replica runs the job, and the others skip
// it; the job takes more than three TTLs, and two TTLs into it, when the key
// would have expired without renewal, the key still holds on a majority of
// the nodes and another process's TryLockContext is refused. The job's ctx is
// never cancelled.
func TestOneReplicaPerTickAndTheLockOutlivesItsTTL(t *testing.T) {
	for name, nodes := range demotest.Backends() {
		t.Run(name, func(t *testing.T) {
			urls := nodes(t)
			reps := newReplicas(t, urls, 3)
			probe := newReplicas(t, urls, 1)[0] // another process
			clients := nodeClients(t, urls)

			for tick := 1; tick <= 2; tick++ {
				work := func(ctx context.Context) error {
					timer := time.NewTimer(2 * ttl)
					defer timer.Stop()
					select {
					case <-timer.C:
					case <-ctx.Done():
						return context.Cause(ctx)
					}
					key := keyPrefix + jobName(tick)
					held := 0
					for _, c := range clients {
						if ms, err := c.PTTL(ctx, key).Result(); err == nil && ms > 0 {
							held++
						}
					}
					assert.GreaterOrEqual(t, held, len(clients)/2+1, "two TTLs into the job, the lock key must still live on a majority")
					err := probe.rs.NewMutex(jobName(tick), mutex.WithTTL(ttl)).TryLockContext(ctx)
					assert.ErrorIs(t, err, mutex.ErrNotObtained, "two TTLs into the job, another process must not get the lock")
					return nightlyReport(jobTime - 2*ttl)(ctx)
				}
				results := runTick(t.Context(), reps, tick, ttl, work)
				ran := 0
				for _, r := range results {
					if !r.Ran {
						assert.ErrorIs(t, r.Err, mutex.ErrNotObtained, "replica %d", r.Replica)
						continue
					}
					ran++
					require.NoError(t, r.Err, "replica %d: the job must end without losing the lock", r.Replica)
					assert.Greater(t, r.Took, 3*ttl, "replica %d", r.Replica)
					t.Logf("tick %d: replica %d ran the job for %v under a %v TTL", tick, r.Replica, r.Took, ttl)
				}
				require.Equal(t, 1, ran, "tick %d: exactly one replica runs the job: %+v", tick, results)
			}
		})
	}
}

// TestLostLockCancelsTheJob deletes the lock's key from every node while the
// job runs, as an operator's FLUSHALL or an expiry during a long pause would
// remove it. The next renewal finds the token gone, so the job's ctx is
// cancelled with a cause matching mutex.ErrLost (and mutex.ErrNotHeld), the
// job stops, and Do's error matches mutex.ErrLost.
func TestLostLockCancelsTheJob(t *testing.T) {
	for name, nodes := range demotest.Backends() {
		t.Run(name, func(t *testing.T) {
			urls := nodes(t)
			jobStopsOnLoss(t, urls, func(key string) {
				for _, c := range nodeClients(t, urls) {
					require.NoError(t, c.Del(t.Context(), key).Err())
				}
			})
		})
	}
}

// TestJobStopsWhenTheNodesRestartEmpty restarts every node empty while the
// job runs (a power cut, with quorumlocktest): the job stops as in
// TestLostLockCancelsTheJob.
func TestJobStopsWhenTheNodesRestartEmpty(t *testing.T) {
	nodes := quorumlocktest.Start(t, 5)
	jobStopsOnLoss(t, nodes.URLs(), func(string) {
		for i := range 5 { // down together, so that no renewal runs in between
			nodes.Hang(i)
		}
		for i := range 5 {
			nodes.Restart(i)
		}
	})
}

// jobStopsOnLoss runs a job that only ends when its ctx is cancelled, calls
// lose with the lock's key once the job runs, and checks that the loss
// stopped the job.
func jobStopsOnLoss(t *testing.T, urls []string, lose func(key string)) {
	r := newReplicas(t, urls, 1)[0]
	const tick = 7
	started := make(chan struct{})
	var cause error
	work := func(ctx context.Context) error {
		close(started)
		err := nightlyReport(wait)(ctx) // returns only when ctx is cancelled
		cause = context.Cause(ctx)
		return err
	}
	done := make(chan result, 1)
	go func() { done <- r.runOnce(t.Context(), jobName(tick), ttl, work) }()

	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the job did not start")
	}
	lose(keyPrefix + jobName(tick))

	var res result
	select {
	case res = <-done:
	case <-time.After(wait):
		t.Fatal("the job was not stopped after its lock was lost")
	}
	require.True(t, res.Ran)
	require.ErrorIs(t, cause, mutex.ErrLost, "the job's ctx must be cancelled with the loss as its cause")
	assert.ErrorIs(t, cause, mutex.ErrNotHeld)
	require.ErrorIs(t, res.Err, mutex.ErrLost)
	assert.Less(t, res.Took, wait, "the job stopped because of the loss, not its own end")
	t.Logf("Do: %v", res.Err)
}

// newReplicas starts n replicas over urls, each with its own connections, as
// the program does, and closes them when the test ends.
func newReplicas(t *testing.T, urls []string, n int) []*replica {
	t.Helper()
	reps, closeAll, err := startReplicas(t.Context(), urls, n)
	require.NoError(t, err)
	t.Cleanup(closeAll)
	return reps
}

// nodeClients returns one plain client per node, for the test to look at and
// tamper with the keys.
func nodeClients(t *testing.T, urls []string) []*redis.Client {
	t.Helper()
	var clients []*redis.Client
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		require.NoError(t, err)
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	return clients
}
