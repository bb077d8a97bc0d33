package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// quarantine is the restart quarantine of the tests that use one.
const quarantine = time.Second

// With a minority of nodes down, paused or restarted empty, after the run
// or during it, a completed key is replayed from another instance, never
// run again.
func TestDoReplaysWithAMinorityFailing(t *testing.T) {
	cases := []struct {
		name   string
		before func(s *redistest.Server) // before the run
		after  func(s *redistest.Server) // after the run, before the replay
	}{
		{"down", nil, func(s *redistest.Server) { s.Kill() }},
		{"paused", nil, func(s *redistest.Server) { s.Pause() }},
		{"restarted empty", nil, func(s *redistest.Server) { s.RestartEmpty() }},
		{"down during the run, back empty", func(s *redistest.Server) { s.Kill() }, func(s *redistest.Server) { s.RestartEmpty() }},
	}
	sets := make([][]*redistest.Server, len(cases)) // one per case: no case meets another's young nodes
	all := redistest.Start(t, 3*len(cases))
	for i := range sets {
		sets[i] = all[3*i : 3*i+3]
	}
	redistest.AwaitUptime(t, all, quarantine)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			servers, key := sets[i], "k"
			faulty := servers[i%len(servers)]
			t.Cleanup(faulty.Resume)
			rs := newRedlock(t, servers, redlock.WithRestartQuarantine(quarantine))
			first := idempotency.New(rs, idempotency.WithLockTTL(quarantine))
			if c.before != nil {
				c.before(faulty)
			}
			requireRuns(t, first, key, "r", &counted{resp: "once"})
			require.NoError(t, rs.Close()) // its commands to a down node end: none reaches it once back
			c.after(faulty)
			for _, rs := range []*redlock.Redlock{newRedlock(t, servers, redlock.WithRestartQuarantine(quarantine)), newRedlock(t, servers)} {
				requireReplays(t, idempotency.New(rs, idempotency.WithLockTTL(quarantine)), key, "r", "once")
			}
		})
	}
}

// A lookup counts only answers it can trust: a node in restart quarantine
// that lost the record does not count as "not completed". Here the record
// is on nodes 0 and 1 (2 was down); 2 came back empty long ago, 0 restarts
// empty and 1 pauses: 0 and 2 both say "no record", but 0 is in quarantine.
func TestDoLookupDoesNotTrustAQuarantinedNode(t *testing.T) {
	servers := redistest.Start(t, 3)
	servers[2].Kill()
	rs := newRedlock(t, servers)
	requireRuns(t, idempotency.New(rs), "k", "r", &counted{resp: "once"})
	require.NoError(t, rs.Close()) // its commands to node 2 end: none reaches it once back
	require.Equal(t, 2, recordsOn(t, servers[:2], "k"))
	servers[2].RestartEmpty()
	redistest.AwaitUptime(t, servers, quarantine)

	// An instance that has met the nodes (a first run on another key)...
	rs = newRedlock(t, servers, redlock.WithRestartQuarantine(quarantine))
	second := idempotency.New(rs, idempotency.WithLockTTL(quarantine))
	requireRuns(t, second, "other", "r", &counted{resp: "ok"})
	// ...sees node 0 restart empty.
	servers[0].RestartEmpty()
	servers[1].Pause()
	t.Cleanup(servers[1].Resume)
	notAgain := func(context.Context) ([]byte, error) { return nil, errors.New("the work ran again") }
	// The first call finds node 0's marker gone: the lock's acquisition
	// judges it and keeps it out.
	_, replayed, err := do(t, second, "k", "r", notAgain)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	require.False(t, replayed)
	// The next one knows node 0 is in quarantine: the lookup itself says
	// it cannot tell, before any lock.
	_, _, err = do(t, second, "k", "r", notAgain)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	require.ErrorContains(t, err, "1 of 3 nodes answered and can be trusted")

	servers[1].Resume()
	// Once the node's reply to the call above is in (nothing signals it):
	require.Eventually(t, func() bool {
		resp, replayed, err := do(t, second, "k", "r", func(context.Context) ([]byte, error) {
			t.Error("the work ran again")
			return nil, errors.New("the work ran again")
		})
		if errors.Is(err, mutex.ErrNodesUnavailable) {
			return false
		}
		assert.NoError(t, err)
		assert.True(t, replayed)
		assert.Equal(t, "once", string(resp))
		return true
	}, 5*time.Second, 50*time.Millisecond)
}

// A record not confirmed on a majority is an error, never a success: when
// the nodes fail during the work, and when the lock is lost to another run.
func TestDoReportsARecordOnAMinority(t *testing.T) {
	t.Run("nodes down", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(2*time.Second)) // tried again while valid
		resp, replayed, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) {
			servers[1].Kill()
			servers[2].Kill()
			return []byte("charged"), nil
		})
		require.ErrorIs(t, err, idempotency.ErrNotRecorded)
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		require.False(t, replayed)
		require.Equal(t, "charged", string(resp), "the work ran: its response comes with the error")
	})
	t.Run("lock lost", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(time.Second))
		resp, _, err := do(t, s, "k", "r", func(ctx context.Context) ([]byte, error) {
			for _, srv := range servers[:2] { // as another run would, once the key expired
				srv.Do(t, "SET", "idempotency:k", "another-run", "PX", "10000")
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				return nil, errors.New("the work's ctx was not cancelled when the lock was lost")
			}
			if !errors.Is(context.Cause(ctx), mutex.ErrLost) {
				return nil, context.Cause(ctx)
			}
			return []byte("charged"), nil
		})
		require.ErrorIs(t, err, idempotency.ErrNotRecorded)
		require.ErrorIs(t, err, mutex.ErrLost)
		require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
		require.Equal(t, "charged", string(resp))
		require.Equal(t, 1, recordsOn(t, servers, "k"), "written only where the key still held this run's token")
	})
	t.Run("too large", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		s := idempotency.New(newRedlock(t, servers), idempotency.WithMaxResponse(4))
		_, _, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) { return []byte("12345"), nil })
		require.ErrorIs(t, err, idempotency.ErrNotRecorded)
		require.ErrorContains(t, err, "over the limit of 4")
		require.NotContains(t, err.Error(), "majority", "no node failed: the error must not point at the nodes")
		require.Zero(t, recordsOn(t, servers, "k"))
	})
}

// When the nodes that did not answer the release that records come back
// while the lock is valid, the release is sent again and the response is
// recorded on a majority: Do succeeds, and no retry runs the work again.
func TestDoRecordsOnNodesThatComeBack(t *testing.T) {
	servers := redistest.Start(t, 5)
	s := idempotency.New(newRedlock(t, servers))
	resp, replayed, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) {
		for _, srv := range servers[2:] {
			srv.Pause()
		}
		time.AfterFunc(2*nodeTimeout, func() { // after the first release failed
			for _, srv := range servers[2:] {
				srv.Resume()
			}
		})
		return []byte("charged"), nil
	})
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "charged", string(resp))
	require.GreaterOrEqual(t, recordsOn(t, servers, "k"), 3)
}

// The release that records is sent again while ctx lasts, and no longer:
// once ctx ends, Do returns (ErrNotRecorded, and ctx's error) without
// waiting for the paused nodes, and the release goes on in the background,
// so a retry replays once they answer. A resend used to wait a whole
// per-node timeout past ctx (review 29: 460ms for a 300ms ctx).
func TestDoReturnsWhenCtxEndsWhileRecording(t *testing.T) {
	servers := redistest.Start(t, 5)
	const timeout = time.Second
	s := idempotency.New(newRedlock(t, servers, redlock.WithNodeTimeout(timeout)))
	ctx, cancel := context.WithTimeout(t.Context(), timeout+200*time.Millisecond)
	defer cancel()
	resp, _, err := s.Do(ctx, "k", []byte("r"), func(context.Context) ([]byte, error) {
		for _, srv := range servers[2:] {
			srv.Pause()
			t.Cleanup(srv.Resume)
		}
		return []byte("charged"), nil
	})
	deadline, _ := ctx.Deadline()
	assert.Less(t, time.Since(deadline), 400*time.Millisecond, "Do returned long after ctx ended")
	require.ErrorIs(t, err, idempotency.ErrNotRecorded)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, "charged", string(resp))
	for _, srv := range servers[2:] {
		srv.Resume()
	}
	require.Eventually(t, func() bool { return recordsOn(t, servers, "k") >= 3 }, 5*time.Second, 10*time.Millisecond)
	requireReplays(t, s, "k", "r", "charged")
}

// Once fn has run, the first send of its record is not cut short by ctx (a
// record never sent would let a retry run fn again): when ctx ends while
// that send waits on a hung majority, Do returns at that send's per-node
// timeout, after ctx's end, with ErrNotRecorded and fn's response (review
// 48: 155-160ms past a 300ms ctx, 10 of 10, with a 200ms per-node timeout).
// The record lands once the nodes answer, and a retry replays.
func TestDoRecordsPastCtxWhenCtxEndsDuringTheFirstSend(t *testing.T) {
	servers := redistest.Start(t, 5)
	const timeout = 300 * time.Millisecond
	s := idempotency.New(newRedlock(t, servers, redlock.WithNodeTimeout(timeout)))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	resp, _, err := s.Do(ctx, "k", []byte("r"), func(context.Context) ([]byte, error) {
		for _, srv := range servers[2:] {
			srv.Pause()
			t.Cleanup(srv.Resume)
		}
		time.Sleep(150 * time.Millisecond) // the work; the record's first send leaves before ctx ends
		return []byte("charged"), nil
	})
	deadline, _ := ctx.Deadline()
	require.ErrorIs(t, err, idempotency.ErrNotRecorded)
	require.Equal(t, "charged", string(resp))
	assert.Less(t, time.Since(deadline), timeout+2*time.Second, "the first send waits one per-node timeout, not more")
	for _, srv := range servers[2:] {
		srv.Resume()
	}
	require.Eventually(t, func() bool { return recordsOn(t, servers, "k") >= 3 }, 5*time.Second, 10*time.Millisecond)
	requireReplays(t, s, "k", "r", "charged")
}

// Every node hangs during the work, longer than the lock's validity: Do
// returns ErrNotRecorded with the response. Once the nodes answer again,
// the release that writes the record, sent again then, writes it where the
// lock expired with no other run since, and a retry replays: the work runs
// once.
func TestARecordOutlivesAnOutageLongerThanTheLock(t *testing.T) {
	servers := redistest.Start(t, 3)
	const ttl = 300 * time.Millisecond
	s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(ttl))
	var paused time.Time
	resp, _, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) {
		for _, srv := range servers {
			srv.Pause()
		}
		paused = time.Now()
		return []byte("charged"), nil
	})
	require.ErrorIs(t, err, idempotency.ErrNotRecorded)
	require.Equal(t, "charged", string(resp))
	// A node's keys expire on its wall clock, paused or not: from the
	// last renewal before the pause at the latest.
	time.Sleep(time.Until(paused.Add(ttl + 50*time.Millisecond)))
	for _, srv := range servers {
		srv.Resume()
	}
	require.Eventually(t, func() bool { return recordsOn(t, servers, "k") == 3 }, 5*time.Second, 10*time.Millisecond)
	requireReplays(t, s, "k", "r", "charged")
}

// Every node hangs during the work, longer than the lock's validity, and
// answers again before the work returns: the release writes the record on
// every node, where the lock key expired, and Do succeeds: the record is on
// a majority. (A review saw ErrNotRecorded, the record on 5 of 5 nodes.)
func TestARecordWrittenAfterTheLockExpiredCounts(t *testing.T) {
	servers := redistest.Start(t, 3)
	const ttl = 300 * time.Millisecond
	s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(ttl))
	resp, replayed, err := do(t, s, "k", "r", func(ctx context.Context) ([]byte, error) {
		for _, srv := range servers {
			srv.Pause()
		}
		paused := time.Now()
		<-ctx.Done() // the lock lost, its keys expiring on the nodes' clocks by now at the latest:
		time.Sleep(time.Until(paused.Add(ttl + 50*time.Millisecond)))
		for _, srv := range servers {
			srv.Resume()
		}
		return []byte("charged"), nil // done all the same (its effect was not cancellable)
	})
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "charged", string(resp))
	// Do returns once a majority wrote it; the last node's write may land after.
	require.Eventually(t, func() bool { return recordsOn(t, servers, "k") == 3 }, 5*time.Second, 10*time.Millisecond)
	requireReplays(t, s, "k", "r", "charged")
}

// TestARecordWrittenAfterTheLockWasFoundLostCounts: a majority of the nodes
// lose their data while the work runs, so the renewals find the lock lost
// (ErrNotHeld); nobody takes the key since, and the release writes the
// record on every node: Do succeeds, and the key replays. (A review saw
// ErrNotRecorded, "a retry may run the work again", with the record on 5
// of 5 nodes, 4 of 4 times.)
func TestARecordWrittenAfterTheLockWasFoundLostCounts(t *testing.T) {
	servers := redistest.Start(t, 5)
	s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(300*time.Millisecond))
	resp, replayed, err := do(t, s, "k", "r", func(ctx context.Context) ([]byte, error) {
		for _, srv := range servers[:3] {
			srv.Do(t, "FLUSHALL")
		}
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), mutex.ErrNotHeld, "found lost by a renewal")
		return []byte("charged"), nil // done all the same
	})
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, "charged", string(resp))
	require.Equal(t, 5, recordsOn(t, servers, "k"))
	requireReplays(t, s, "k", "r", "charged")
}

// TestReplayDoesNotWaitForAPausedNode: with one node of five paused and a
// per-node timeout of 5s, replays of a completed key return well within
// it: the record's lookup is decided by a majority's answers.
func TestReplayDoesNotWaitForAPausedNode(t *testing.T) {
	servers := redistest.Start(t, 5)
	s := idempotency.New(newRedlock(t, servers, redlock.WithNodeTimeout(5*time.Second)))
	requireRuns(t, s, "k", "r", &counted{resp: "ok"})
	servers[4].Pause()
	t.Cleanup(servers[4].Resume)
	for range 3 {
		start := time.Now()
		requireReplays(t, s, "k", "r", "ok")
		require.Less(t, time.Since(start), 2*time.Second)
	}
}

// A key nobody else uses whose lock this process cannot have in time (its
// fencing number, behind on one node, needs a second round the slow replies
// push past the validity) is not "in progress": Do says the lock was not
// obtained, runs nothing, and the middleware answers 503, not 409.
func TestALockNotHadInTimeIsNotInProgress(t *testing.T) {
	servers := redistest.Start(t, 3)
	clients := make([]*redis.Client, len(servers))
	universal := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		clients[i] = srv.Client(t)
		universal[i] = clients[i]
	}
	rs, err := redlock.New(universal, redlock.WithNodeTimeout(nodeTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	s := idempotency.New(rs, idempotency.WithLockTTL(100*time.Millisecond))
	requireRuns(t, s, "warm", "r", &counted{resp: "done"}) // the scripts loaded: one round trip per round
	servers[0].Do(t, "SET", "quorumlock:fence", "100")     // the others' counters are behind: written back
	for _, c := range clients {
		c.AddHook(redistest.SlowReplies(60 * time.Millisecond))
	}
	c := &counted{resp: "done"}
	_, _, err = s.Do(t.Context(), "fresh", []byte("r"), c.fn)
	require.ErrorIs(t, err, mutex.ErrNotObtained)
	require.NotErrorIs(t, err, idempotency.ErrInProgress, "nobody else runs it: %v", err)
	require.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "every node answered: %v", err)
	require.Zero(t, c.runs.Load(), "nothing run")

	servers[0].Do(t, "SET", "quorumlock:fence", "1000000000000000000") // behind again
	var ran atomic.Bool
	srv := httptest.NewServer(idempotency.Middleware(s)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) })))
	defer srv.Close()
	requireProblem(t, send(t, srv, http.MethodPost, "/", "fresh-http", "r"), http.StatusServiceUnavailable)
	require.False(t, ran.Load(), "nothing run")
}

// Keys that completed while two of five nodes were paused have their
// records on the other three; one of those emptied (FLUSHALL, as a restart
// without persistence) leaves each record on two, a minority. Retries once
// the paused nodes answer again replay every key, from another process: the
// lookup's majority finds no record, but the lock's acquisition hears every
// node and one record refuses it (a review: 4 to 5 keys of 50 ran again,
// and some answered ErrInProgress, in every run).
func TestARecordOnAMinorityOfNodesStillReplays(t *testing.T) {
	const keys = 20
	servers := redistest.Start(t, 5)
	for _, srv := range servers[3:] {
		srv.Pause()
	}
	s := idempotency.New(newRedlock(t, servers))
	for k := range keys {
		requireRuns(t, s, fmt.Sprint("key-", k), "r", &counted{resp: "ok"})
	}
	require.NoError(t, servers[0].Client(t).FlushAll(t.Context()).Err())
	for _, srv := range servers[3:] {
		srv.Resume()
	}
	again := idempotency.New(newRedlock(t, servers))
	for k := range keys {
		requireReplays(t, again, fmt.Sprint("key-", k), "r", "ok")
	}
}

// A record on a node that answers late still stops the work: the
// acquisition waits for every node (each within its per-node timeout), not
// only the majority that won it. The record is left on one node alone,
// paused for 300ms as the call begins; the lookup's majority of the others
// finds none.
func TestARecordOnALateNodeStillReplays(t *testing.T) {
	servers := redistest.Start(t, 5)
	requireRuns(t, idempotency.New(newRedlock(t, servers)), "k", "r", &counted{resp: "ok"})
	for _, srv := range servers[:4] {
		srv.Do(t, "DEL", recordKey("k"))
	}
	s := idempotency.New(newRedlock(t, servers, redlock.WithNodeTimeout(2*time.Second)))
	requireRuns(t, s, "other", "r", &counted{resp: "x"}) // every node met, none known slow
	servers[4].Pause()
	time.AfterFunc(300*time.Millisecond, servers[4].Resume)
	requireReplays(t, s, "k", "r", "ok")
}

// A call whose ctx ends while nodes have not answered reports ctx's error
// and the nodes that failed, not those whose answer ctx cut short: as a
// Mutex's interrupted attempt, no *mutex.NodeError for them, and not
// ErrNodesUnavailable. (Once, a Do with a 20-400µs ctx on healthy nodes
// carried a NodeError "context deadline exceeded" for each node.)
func TestACtxThatEndsIsNoNodesFailure(t *testing.T) {
	servers := redistest.Start(t, 5)
	s := idempotency.New(newRedlock(t, servers))
	requireRuns(t, s, "met", "r", &counted{resp: "ok"}) // every node met
	for _, srv := range servers[:3] {
		srv.Pause()
	}
	defer func() {
		for _, srv := range servers[:3] {
			srv.Resume()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), nodeTimeout/5) // ends before the per-node timeout
	defer cancel()
	c := &counted{resp: "x"}
	_, _, err := s.Do(ctx, "cut", []byte("r"), c.fn)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable, "no node failed: ctx ended first")
	var ne *mutex.NodeError
	assert.False(t, errors.As(err, &ne), "a node whose answer ctx cut short is reported as failed: %v", err)
	assert.Zero(t, c.runs.Load())
}

// A node whose record key fails the lookup (here a key of another type in
// its place) is a node fault, reported as such: not ErrInProgress, which
// says another call runs and a retry may succeed. (A review: with the key
// a list on 2 of 5 nodes, every call answered ErrInProgress "its record
// expired while this call looked it up; try again", forever.)
func TestARecordKeyOfAnotherTypeIsANodeFault(t *testing.T) {
	servers := redistest.Start(t, 5)
	s := idempotency.New(newRedlock(t, servers))
	for _, srv := range servers[:2] {
		srv.Do(t, "LPUSH", recordKey("typed"), "x")
	}
	c := &counted{resp: "x"}
	_, _, err := do(t, s, "typed", "r", c.fn)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
	assert.NotErrorIs(t, err, idempotency.ErrInProgress)
	var ne *mutex.NodeError
	require.ErrorAs(t, err, &ne)
	assert.Contains(t, ne.Error(), "WRONGTYPE")
	assert.Zero(t, c.runs.Load(), "nothing run")
}
