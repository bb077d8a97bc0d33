package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Once across retries: after a call completed, a call with the same key and
// request, from another Redlock (another instance), replays its response
// without running the work, until the retention ends; then the key is free.
func TestDoReplaysAcrossInstancesUntilRetentionEnds(t *testing.T) {
	servers := redistest.Start(t, 3)
	const retention = 1500 * time.Millisecond
	first := idempotency.New(newRedlock(t, servers), idempotency.WithRetention(retention))
	second := idempotency.New(newRedlock(t, servers), idempotency.WithRetention(retention))
	c := &counted{resp: "charged 42"}
	requireRuns(t, first, "order-1", "charge 42", c)
	completed := time.Now()
	requireReplays(t, second, "order-1", "charge 42", "charged 42")
	requireReplays(t, first, "order-1", "charge 42", "charged 42")
	require.Less(t, time.Since(completed), retention, "the replays came within the retention; the machine is too slow for this test")
	require.Equal(t, 3, recordsOn(t, servers, "order-1"))

	// After the retention the record is gone from every node: the key runs again.
	require.Eventually(t, func() bool { return recordsOn(t, servers, "order-1") == 0 }, 5*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(completed), retention-100*time.Millisecond, "the record outlived the retention")
	c2 := &counted{resp: "charged again"}
	requireRuns(t, second, "order-1", "charge 42", c2)
	requireReplays(t, first, "order-1", "charge 42", "charged again")
}

// A key that completed with another request is refused, never replayed and
// never run.
func TestDoRefusesAKeyReusedWithAnotherRequest(t *testing.T) {
	servers := redistest.Start(t, 3)
	s := idempotency.New(newRedlock(t, servers))
	c := &counted{resp: "ok"}
	requireRuns(t, s, "k", "request A", c)
	resp, replayed, err := do(t, s, "k", "request B", c.fn)
	require.ErrorIs(t, err, idempotency.ErrKeyReused)
	require.False(t, replayed)
	require.Nil(t, resp)
	require.Equal(t, int32(1), c.runs.Load())
}

// Failures are not remembered: work that fails stores nothing and frees the
// key at once, so a retry runs it again.
func TestDoDoesNotRememberFailures(t *testing.T) {
	servers := redistest.Start(t, 3)
	s := idempotency.New(newRedlock(t, servers))
	boom := errors.New("card declined")
	resp, replayed, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) { return []byte("partial"), boom })
	require.ErrorIs(t, err, boom)
	require.False(t, replayed)
	require.Nil(t, resp)
	require.Zero(t, recordsOn(t, servers, "k"))
	c := &counted{resp: "ok"}
	requireRuns(t, s, "k", "r", c) // at once: the lock was released
	requireReplays(t, s, "k", "r", "ok")
}

// While a call runs its work, another call with the key gets ErrInProgress
// at once, or, WithWait, waits and replays the response. The work's ctx
// carries the lock's fencing number.
func TestDoInProgressAndWait(t *testing.T) {
	servers := redistest.Start(t, 3)
	s := idempotency.New(newRedlock(t, servers))
	waiting := idempotency.New(newRedlock(t, servers), idempotency.WithWait())
	started, finish := make(chan uint64), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		resp, replayed, err := do(t, s, "k", "r", func(ctx context.Context) ([]byte, error) {
			started <- idempotency.FencingToken(ctx)
			<-finish
			return []byte("done"), nil
		})
		assert.NoError(t, err)
		assert.False(t, replayed)
		assert.Equal(t, "done", string(resp))
	})
	fence := <-started
	require.NotZero(t, fence, "the work's ctx carries the fencing number")
	require.Zero(t, idempotency.FencingToken(context.Background()))

	_, _, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) { return nil, errors.New("ran twice") })
	require.ErrorIs(t, err, idempotency.ErrInProgress)

	type result struct {
		resp     []byte
		replayed bool
		err      error
	}
	waited := make(chan result, 1)
	go func() {
		resp, replayed, err := do(t, waiting, "k", "r", func(context.Context) ([]byte, error) { return nil, errors.New("ran twice") })
		waited <- result{resp, replayed, err}
	}()
	require.Eventually(t, func() bool { return waitingFor(t, servers, "k") }, 5*time.Second, 5*time.Millisecond)
	close(finish)
	wg.Wait()
	r := <-waited
	require.NoError(t, r.err)
	require.True(t, r.replayed)
	require.Equal(t, "done", string(r.resp))

	// A waiter whose ctx ends first: ErrInProgress with ctx's error.
	hold, release := make(chan struct{}), make(chan struct{})
	wg.Go(func() {
		_, _, err := do(t, s, "k2", "r", func(context.Context) ([]byte, error) { close(hold); <-release; return nil, nil })
		assert.NoError(t, err)
	})
	<-hold
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err = waiting.Do(ctx, "k2", []byte("r"), func(context.Context) ([]byte, error) { return nil, errors.New("ran twice") })
	require.ErrorIs(t, err, idempotency.ErrInProgress)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(release)
	wg.Wait()
}

// waitingFor reports whether some caller waits in the queue of key's lock.
func waitingFor(t testing.TB, servers []*redistest.Server, key string) bool {
	for _, s := range servers {
		if s.Do(t, "ZCARD", "idempotency:"+key+":quorumlock:q").(int64) > 0 {
			return true
		}
	}
	return false
}

// Bad input is mutex.ErrInvalid and sends nothing: the Redlock here points
// at no server, so anything sent would fail as ErrNodesUnavailable instead.
func TestDoRefusesBadInput(t *testing.T) {
	rs, err := redlock.NewFromURLs(t.Context(), []string{"redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	ok := func(context.Context) ([]byte, error) { return []byte("ran"), nil }
	good := idempotency.New(rs)
	quarantined, err := redlock.NewFromURLs(t.Context(), []string{"redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"},
		redlock.WithRestartQuarantine(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = quarantined.Close() })
	var nilStore *idempotency.Store
	cases := []struct {
		name string
		s    *idempotency.Store
		ctx  context.Context
		key  string
		fn   func(context.Context) ([]byte, error)
		want string
	}{
		{"empty key", good, t.Context(), "", ok, "empty key"},
		{"long key", good, t.Context(), strings.Repeat("k", idempotency.MaxKeyLen+1), ok, "longer than 255"},
		{"nil fn", good, t.Context(), "k", nil, "nil fn"},
		{"nil ctx", good, nil, "k", ok, "nil context"},
		{"nil store", nilStore, t.Context(), "k", ok, "nil *Store"},
		{"nil redlock", idempotency.New(nil), t.Context(), "k", ok, "nil *redlock.Redlock"},
		{"short retention", idempotency.New(rs, idempotency.WithRetention(time.Microsecond)), t.Context(), "k", ok, "retention"},
		{"bad lock TTL", idempotency.New(rs, idempotency.WithLockTTL(-time.Second)), t.Context(), "k", ok, "lock TTL"},
		{"no room for a response", idempotency.New(rs, idempotency.WithMaxResponse(0)), t.Context(), "k", ok, "max response 0"},
		{"negative max response", idempotency.New(rs, idempotency.WithMaxResponse(-1)), t.Context(), "k", ok, "max response -1"},
		{"lock TTL under a lease's", idempotency.New(rs, idempotency.WithLockTTL(50*time.Millisecond)), t.Context(), "k", ok, "MinLeaseTTL"},
		{"lock TTL over the quarantine", idempotency.New(quarantined, idempotency.WithLockTTL(2*time.Second)), t.Context(), "k", ok, "restart quarantine"},
		{"reserved key", good, t.Context(), "k:quorumlock:q", ok, "bookkeeping"},
		// Another key's record: "a" would find its record replaced by a
		// lock, or delete this key's lock with its record.
		{"another key's record", good, t.Context(), "a:quorumlock:idem", ok, "bookkeeping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, replayed, err := c.s.Do(c.ctx, c.key, []byte("r"), c.fn)
			require.ErrorIs(t, err, mutex.ErrInvalid)
			require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
			require.ErrorContains(t, err, c.want)
			require.False(t, replayed)
			require.Nil(t, resp)
		})
	}
	// The longest key is accepted: the call reaches the (absent) nodes.
	_, _, err = good.Do(t.Context(), strings.Repeat("k", idempotency.MaxKeyLen), nil, ok)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable)

	require.NoError(t, rs.Close())
	_, _, err = good.Do(t.Context(), "k", nil, ok)
	require.ErrorIs(t, err, mutex.ErrClosed)
}

// WithWait: a waiter whose key's run failed runs the work itself.
func TestDoWaiterRunsWhenTheRunItWaitedForFails(t *testing.T) {
	servers := redistest.Start(t, 3)
	s := idempotency.New(newRedlock(t, servers))
	waiting := idempotency.New(newRedlock(t, servers), idempotency.WithWait())
	started, fail := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) {
			close(started)
			<-fail
			return nil, errors.New("declined")
		})
		assert.ErrorContains(t, err, "declined")
	})
	<-started
	c := &counted{resp: "charged by the waiter"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, replayed, err := do(t, waiting, "k", "r", c.fn)
		assert.NoError(t, err)
		assert.False(t, replayed)
		assert.Equal(t, c.resp, string(resp))
	}()
	require.Eventually(t, func() bool { return waitingFor(t, servers, "k") }, 5*time.Second, 5*time.Millisecond)
	close(fail)
	wg.Wait()
	<-done
	require.Equal(t, int32(1), c.runs.Load())
}

// Work that panics frees the key at once, recording nothing: a retry runs
// it, instead of finding the key in progress while the lease is renewed.
func TestDoPanicFreesTheKey(t *testing.T) {
	servers := redistest.Start(t, 3)
	s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(time.Second))
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		_, _, _ = do(t, s, "k", "r", func(context.Context) ([]byte, error) { panic("boom") })
	}()
	require.Zero(t, recordsOn(t, servers, "k"))
	requireRuns(t, s, "k", "r", &counted{resp: "charged"})
}

// A ctx that ended before the work could run is ctx's error, not a key in
// progress, and nothing runs.
func TestDoWithAnEndedCtx(t *testing.T) {
	servers := redistest.Start(t, 3)
	s := idempotency.New(newRedlock(t, servers))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c := &counted{}
	_, _, err := s.Do(ctx, "k", []byte("r"), c.fn)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, idempotency.ErrInProgress)
	require.Zero(t, c.runs.Load())
}

// WithKeyPrefix keeps Stores apart when neither prefix starts with the
// other, and its doc says what happens when one does: the names are plain
// concatenations, so key "bc" under "a" is key "c" under "ab".
func TestKeyPrefixesKeepStoresApart(t *testing.T) {
	nodes := redistest.Start(t, 3)
	rs := newRedlock(t, nodes)
	billing, shipping := idempotency.New(rs, idempotency.WithKeyPrefix("billing:")), idempotency.New(rs, idempotency.WithKeyPrefix("shipping:"))
	work := &counted{resp: "ok"}
	for _, s := range []*idempotency.Store{billing, shipping, billing} {
		_, _, err := do(t, s, "k", "r", work.fn)
		require.NoError(t, err)
	}
	require.Equal(t, int32(2), work.runs.Load(), "one run per Store; the third call replays")

	short, long := idempotency.New(rs, idempotency.WithKeyPrefix("a")), idempotency.New(rs, idempotency.WithKeyPrefix("ab"))
	_, _, err := do(t, short, "bc", "r", work.fn)
	require.NoError(t, err)
	_, replayed, err := do(t, long, "c", "r", work.fn)
	require.NoError(t, err)
	require.True(t, replayed, "as WithKeyPrefix's doc warns")
}
