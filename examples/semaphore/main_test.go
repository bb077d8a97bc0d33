package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/examples/internal/demotest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait for a signal; none is expected to take more than a
// fraction of it.
const wait = 20 * time.Second

// TestRun runs the program as `go run ./examples/semaphore` does, on
// embedded nodes and with -nodes pointing at 3 real redis-servers; run fails
// unless every export ran to its end and the database never served more
// than limit at once.
func TestRun(t *testing.T) {
	for name, nodes := range demotest.Backends() {
		t.Run(name, func(t *testing.T) {
			s, err := run(t.Context(), t.Output(), strings.Join(nodes(t), ","))
			require.NoError(t, err)
			assert.LessOrEqual(t, s.Peak, limit)
			assert.Equal(t, replicas*perReplica, s.Served)
		})
	}
}

// TestLimitExportsAtOnceAcrossReplicas sends every replica's requests at
// once with exports that run until the test lets them finish. Exactly limit
// of them get a permit and run; while they do, another replica's
// TryAcquireContext is refused with ErrNotObtained (every permit is held,
// no node failed), and the database serves limit exports. Each export the
// test finishes lets one waiting export in, until all have run; the
// database never served more than limit at once.
func TestLimitExportsAtOnceAcrossReplicas(t *testing.T) {
	for name, nodes := range demotest.Backends() {
		t.Run(name, func(t *testing.T) {
			urls := nodes(t)
			reps := newReplicas(t, urls, replicas)
			probe := newReplicas(t, urls, 1)[0]
			const total = replicas * perReplica
			db := &database{}
			entered := make(chan struct{}, total)
			finish := make(chan struct{}, total) // one token lets one export end
			export := func(ctx context.Context) error {
				entered <- struct{}{}
				select {
				case <-finish:
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
			results := make(chan exportResult, total)
			for _, r := range reps {
				for e := range perReplica {
					go func() {
						results <- r.runExport(t.Context(), e, func(ctx context.Context) error { return db.serve(ctx, export) })
					}()
				}
			}
			for range limit {
				receive(t, entered, "an export to get a permit")
			}
			_, err := probe.permits.TryAcquireContext(t.Context())
			require.ErrorIs(t, err, mutex.ErrNotObtained, "a permit beyond the limit")
			assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "every permit is held: not an outage")
			peak, served := db.stats()
			assert.Equal(t, limit, peak)
			assert.Equal(t, limit, served)

			for done := range total {
				finish <- struct{}{}
				res := receive(t, results, "an export to end")
				require.NoError(t, res.Err, "replica %d, export %d", res.Replica, res.Export)
				if done+limit < total {
					receive(t, entered, "a waiting export to get the permit given back")
				}
			}
			peak, served = db.stats()
			assert.Equal(t, limit, peak, "the most exports served at once")
			assert.Equal(t, total, served)
		})
	}
}

// TestCrashedReplicaGivesItsPermitsBack crashes a replica that holds every
// permit (its connections close: no renewal, no release). Its exports are
// cancelled with a cause matching mutex.ErrLost, and another replica's
// waiting export gets a permit only once one of the crashed replica's
// permits has expired: after the end of its validity.
func TestCrashedReplicaGivesItsPermitsBack(t *testing.T) {
	for name, nodes := range demotest.Backends() {
		t.Run(name, func(t *testing.T) {
			urls := nodes(t)
			rs, crash, closeAll, err := demo.OpenCrashable(urls, redlock.WithKeyPrefix(keyPrefix))
			require.NoError(t, err)
			t.Cleanup(closeAll)
			doomed := newReplica(1, rs)
			survivor := newReplicas(t, urls, 1)[0]

			entered := make(chan time.Time, limit)
			results := make(chan exportResult, limit)
			for e := range limit {
				go func() {
					results <- doomed.runExport(t.Context(), e, func(ctx context.Context) error {
						entered <- time.Now()
						<-ctx.Done() // runs until its permit is lost
						return context.Cause(ctx)
					})
				}()
			}
			for range limit {
				receive(t, entered, "the doomed replica's exports to start")
			}
			got := make(chan exportResult, 1)
			waiterCtx, cancel := context.WithTimeout(t.Context(), wait)
			defer cancel()
			go func() {
				got <- survivor.runExport(waiterCtx, 0, func(context.Context) error { return nil })
			}()
			crash()
			crashed := time.Now()
			var lost []exportResult
			for range limit {
				res := receive(t, results, "a crashed replica's export to be cancelled")
				require.ErrorIs(t, res.Err, mutex.ErrLost, "export %d", res.Export)
				require.False(t, res.Until.IsZero(), "a permit lost for want of nodes keeps its validity's end")
				lost = append(lost, res)
			}
			res := receive(t, got, "the survivor's export")
			require.NoError(t, res.Err)
			// One permit comes free when its holder's validity ends: the
			// survivor's makes limit with those of the crashed exports
			// still valid then, never more. (Each permit is renewed on its
			// own schedule, so their validities end a few ms apart.)
			var valid []int
			for _, l := range lost {
				if !res.Acquired.After(l.Until) {
					valid = append(valid, l.Export)
				}
			}
			assert.Less(t, len(valid), limit, "the survivor got a permit at %v, within the validity of every crashed export's (%v): more than %d held at once",
				res.Acquired, valid, limit)
			t.Logf("the survivor got a permit %v after the crash", res.Acquired.Sub(crashed))
		})
	}
}

// receive returns the next value from ch, failing the test after wait.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("waited %v for %s", wait, what)
		panic("unreachable")
	}
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
