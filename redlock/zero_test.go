package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/quorumlocktest"
	"github.com/quorumlock/quorumlock/redlock"
)

// zeroCase is one row of TestZeroAndNilValues: call is the misuse, want a
// substring of its error ("" when it must succeed).
type zeroCase struct {
	name string
	call func(ctx context.Context) error
	want string
}

// TestZeroAndNilValues: a value not made by its constructor (zero or nil),
// or a nil argument, is a clear error naming the problem, matching
// mutex.ErrInvalid; never a panic, and nothing is written to any node.
// quorumlocktest's Nodes, which has no test to fail when not made by Start,
// panics with a message saying so instead of a nil dereference.
func TestZeroAndNilValues(t *testing.T) {
	servers := redistest.Start(t, 3)
	rs, err := redlock.New(redistest.Clients(t, servers))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	held := rs.NewMutex("held")
	require.NoError(t, held.LockContext(t.Context()))
	handle, err := held.Handle()
	require.NoError(t, err)
	require.NoError(t, held.UnlockContext(t.Context()))
	rs.Settle() // the release answered by a majority: the last node's too
	before := nodeState(t, servers)

	var zero redlock.Redlock
	var nilRS *redlock.Redlock
	var nilCtx context.Context // the bad input under test
	fn := func(context.Context) ([]byte, error) { return []byte("ran"), nil }
	var zeroStore idempotency.Store
	var nilStore *idempotency.Store
	var zeroElection mutex.Election
	var nilElection *mutex.Election
	rows := []zeroCase{
		{name: "idempotency: Do on a zero Store", want: "zero Store; create Stores with idempotency.New",
			call: func(ctx context.Context) error { _, _, err := zeroStore.Do(ctx, "k", nil, fn); return err }},
		{name: "idempotency: Do on a nil *Store", want: "nil *Store",
			call: func(ctx context.Context) error { _, _, err := nilStore.Do(ctx, "k", nil, fn); return err }},
		{name: "idempotency: New(nil)", want: "nil *redlock.Redlock",
			call: func(ctx context.Context) error { _, _, err := idempotency.New(nil).Do(ctx, "k", nil, fn); return err }},
		{name: "idempotency: New(&redlock.Redlock{})", want: "zero redlock.Redlock; create it with redlock.New",
			call: func(ctx context.Context) error { _, _, err := idempotency.New(&zero).Do(ctx, "k", nil, fn); return err }},
		{name: "idempotency: Do with nil fn and nil request", want: "nil fn",
			call: func(ctx context.Context) error { _, _, err := idempotency.New(rs).Do(ctx, "k", nil, nil); return err }},
		{name: "idempotency: FencingToken(nil)",
			call: func(context.Context) error {
				return expect(idempotency.FencingToken(nilCtx) == 0, "FencingToken(nil) is 0")
			}},
		middleware("nil *Store", func() *idempotency.Store { return nil }, "nil *Store"),
		middleware("zero Store", func() *idempotency.Store { return &zeroStore }, "zero Store"),
		middleware("Store of a zero Redlock", func() *idempotency.Store { return idempotency.New(&zero) }, "zero redlock.Redlock"),
		{name: "middleware: nil handler to wrap", want: `500 {"detail":"idempotency: Middleware: nil http.Handler`, call: func(ctx context.Context) error {
			rec := httptest.NewRecorder()
			idempotency.Middleware(idempotency.New(rs))(nil).ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "POST", "/", nil))
			return fmt.Errorf("%d %s", rec.Code, rec.Body)
		}},

		{name: "redlock: zero Redlock's accessors and Close", call: func(context.Context) error {
			return expect(zero.Nodes() == nil && zero.Quorum() == 0 && zero.Waiting("a") == 0 && zero.Close() == nil && zero.Close() == nil, "no nodes, nothing to close")
		}},
		{name: "redlock: nil *Redlock's accessors and Close", call: func(context.Context) error {
			return expect(nilRS.Nodes() == nil && nilRS.Quorum() == 0 && nilRS.Waiting("a") == 0 && nilRS.Close() == nil, "no nodes, nothing to close")
		}},
		{name: "redlock: zero Redlock's Mutex", want: "has no node set",
			call: func(ctx context.Context) error { return zero.NewMutex("a").TryLockContext(ctx) }},
		{name: "redlock: zero Redlock's multi-name Mutex", want: "has no node set",
			call: func(ctx context.Context) error { return zero.NewMultiMutex([]string{"a", "b"}).TryLockContext(ctx) }},
		{name: "redlock: zero Redlock's RWMutex", want: "has no node set",
			call: func(ctx context.Context) error { return zero.NewRWMutex("a").TryRLockContext(ctx) }},
		{name: "redlock: zero Redlock's Semaphore", want: "has no node set",
			call: func(ctx context.Context) error {
				_, err := zero.NewSemaphore("a", 2).TryAcquireContext(ctx)
				return err
			}},
		{name: "redlock: zero Redlock's Do", want: "has no node set",
			call: func(ctx context.Context) error { return zero.Do(ctx, "a", func(context.Context) error { return nil }) }},
		{name: "redlock: zero Redlock's ResumeMutex of a good handle", want: "has no node set",
			call: func(ctx context.Context) error { _, err := zero.ResumeMutex(ctx, handle); return err }},
		{name: "redlock: zero Redlock's Inspect", want: "inspect on a zero Redlock; create it with redlock.New",
			call: func(ctx context.Context) error { _, err := zero.Inspect(ctx, "a"); return err }},
		{name: "redlock: zero Redlock's ForceUnlock", want: "force-unlock on a zero Redlock",
			call: func(ctx context.Context) error { _, err := zero.ForceUnlock(ctx, "a"); return err }},
		{name: "redlock: zero Redlock's Check", want: "check on a zero Redlock",
			call: func(ctx context.Context) error { _, err := zero.Check(ctx); return err }},
		{name: "redlock: nil *Redlock's Inspect", want: "inspect on a nil *Redlock",
			call: func(ctx context.Context) error { _, err := nilRS.Inspect(ctx, "a"); return err }},
		{name: "redlock: Do with a nil fn", want: "nil fn",
			call: func(ctx context.Context) error { return rs.Do(ctx, "a", nil) }},
		{name: "redlock: Inspect with a nil ctx", want: "nil context",
			call: func(context.Context) error { _, err := rs.Inspect(nilCtx, "a"); return err }},

		{name: "election: Campaign with a nil ctx", want: "nil context",
			call: func(context.Context) error { return rs.NewElection("e").Campaign(nilCtx, "v") }},
		{name: "election: zero Redlock's Campaign", want: "zero Election",
			call: func(ctx context.Context) error { return zero.NewElection("e").Campaign(ctx, "v") }},
	}
	for what, e := range map[string]*mutex.Election{"zero Election": &zeroElection, "nil *Election": nilElection} {
		rows = append(rows,
			zeroCase{name: "election: " + what + " Campaign", want: what, call: func(ctx context.Context) error { return e.Campaign(ctx, "v") }},
			zeroCase{name: "election: " + what + " Proclaim", want: what, call: func(ctx context.Context) error { return e.Proclaim(ctx, "v") }},
			zeroCase{name: "election: " + what + " Resign", want: what, call: func(ctx context.Context) error { return e.Resign(ctx) }},
			zeroCase{name: "election: " + what + " Leader", want: what, call: func(ctx context.Context) error { _, err := e.Leader(ctx); return err }},
			zeroCase{name: "election: " + what + " accessors", call: func(ctx context.Context) error {
				_, open := <-e.Observe(ctx)
				<-e.Done()
				return expect(!open && e.Until().IsZero() && e.FencingToken() == 0, "Observe closed, Done closed, no Until nor fencing token")
			}},
		)
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := row.call(ctx)
			if row.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, row.want)
			if !strings.HasPrefix(row.name, "middleware:") { // an HTTP answer, not an error
				require.ErrorIs(t, err, mutex.ErrInvalid)
				require.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
			}
		})
	}
	require.Equal(t, before, nodeState(t, servers), "nothing written, no script run")

	var zeroNodes quorumlocktest.Nodes
	var nilNodes *quorumlocktest.Nodes
	assert.Empty(t, zeroNodes.URLs())
	assert.Nil(t, nilNodes.URLs())
	for name, call := range map[string]func(){
		"Redlock": func() { zeroNodes.Redlock() }, "Stop": func() { zeroNodes.Stop(0) }, "Start": func() { nilNodes.Start(0) },
		"Restart": func() { zeroNodes.Restart(0) }, "Hang": func() { nilNodes.Hang(0) }, "Unhang": func() { zeroNodes.Unhang(0) },
		"FastForward": func() { zeroNodes.FastForward(time.Second) },
	} {
		assert.PanicsWithValue(t, "quorumlocktest: "+name+" on a Nodes not made by Start; get one from quorumlocktest.Start(t, n)", call)
	}
	assert.PanicsWithValue(t, "quorumlocktest: Start: nil testing.TB; pass the test's t", func() { quorumlocktest.Start(nil, 3) })
}

// middleware is a row calling Middleware(store())'s handler with an
// Idempotency-Key: it must answer 500 with a problem naming want, and not
// run the handler; without the header, the request passes through.
func middleware(name string, store func() *idempotency.Store, want string) zeroCase {
	return zeroCase{name: "middleware: " + name, want: want, call: func(ctx context.Context) error {
		ran := 0
		h := idempotency.Middleware(store())(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran++ }))
		plain := httptest.NewRecorder()
		h.ServeHTTP(plain, httptest.NewRequestWithContext(ctx, "POST", "/", nil))
		if ran != 1 || plain.Code != http.StatusOK {
			return fmt.Errorf("a request without the header: status %d, handler ran %d times", plain.Code, ran)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, "POST", "/", strings.NewReader("b"))
		req.Header.Set(idempotency.KeyHeader, "k")
		h.ServeHTTP(rec, req)
		if ran != 1 || rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "Misconfigured") {
			return fmt.Errorf("status %d, handler ran %d times: %s", rec.Code, ran-1, rec.Body)
		}
		return errors.New(rec.Body.String())
	}}
}

// expect returns nil if ok, else an error saying what was expected.
func expect(ok bool, what string) error {
	if ok {
		return nil
	}
	return errors.New("expected: " + what)
}

// nodeState is, per server, its number of keys and script calls.
func nodeState(t *testing.T, servers []*redistest.Server) []string {
	t.Helper()
	out := make([]string, len(servers))
	for i, s := range servers {
		info := s.Do(t, "INFO", "commandstats").(string)
		var scripts []string
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "cmdstat_eval") {
				calls, _, _ := strings.Cut(line, ",usec=")
				scripts = append(scripts, calls)
			}
		}
		out[i] = fmt.Sprintf("keys=%v %v", s.Do(t, "DBSIZE"), scripts)
	}
	return out
}
