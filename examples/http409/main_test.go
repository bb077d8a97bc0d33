package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/quorumlocktest"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestMain runs a server process when run started this binary as one (see
// startServerProcess); otherwise the tests, checking for leaked goroutines,
// except go-redis's probe of a node it could not dial (a killed one), which
// outlives Close by up to a second.
func TestMain(m *testing.M) {
	if os.Getenv(envServe) != "" {
		os.Exit(serveMain())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// wait bounds every wait for a signal; none is expected to take more than a
// fraction of it.
const wait = 10 * time.Second

// TestRun runs the program as `go run ./examples/http409` does, on embedded
// nodes, and fails if its claim does not hold: one 200 and nine 409 for
// concurrent requests, then 200 for the retry, no overlapping charge.
func TestRun(t *testing.T) {
	require.NoError(t, run(t.Context(), t.Output(), ""))
}

// TestRunOnRealRedis runs the program with -nodes pointing at 3 real
// redis-server processes.
func TestRunOnRealRedis(t *testing.T) {
	servers := redistest.Start(t, 3)
	require.NoError(t, run(t.Context(), t.Output(), urls(servers)))
}

// TestDuplicatesDuringAChargeGet409 starts a charge and holds it open until
// 19 more requests for the same payment, sent at once, have been answered, and
// checks that all of those got 409 with the JSON body, that another payment is
// not blocked meanwhile, that the held request then gets 200, and that a retry
// after it gets 200 again (the lock was released) with the same receipt. It
// runs on embedded nodes and on 3 real redis-servers.
//
// The first request is sent alone, so that the test knows which one holds
// the lock (TestSimultaneousRequestsChargeExactlyOnce starts them together).
func TestDuplicatesDuringAChargeGet409(t *testing.T) {
	for name, nodes := range nodeSets() {
		t.Run(name, func(t *testing.T) {
			const requests = 20
			ledger, entered, release := holdingLedger("42", requests)
			srv := startServer(t, newPayments(t, nodes(t), ledger))

			first := make(chan answer, 1)
			go func() { first <- srv.post(t, "/payments/42/charge", `{"amount_cents": 1299}`) }()
			recv(t, entered, "the first request entering the charge")

			answers := make(chan answer, requests)
			for range requests - 1 {
				go func() { answers <- srv.post(t, "/payments/42/charge", `{"amount_cents": 1299}`) }()
			}
			for range requests - 1 {
				a := recv(t, answers, "a 409")
				require.Equal(t, http.StatusConflict, a.status, a.body)
				assert.JSONEq(t, `{"error":"payment 42 is already being processed","retry_after_ms":500}`, a.body)
				assert.Equal(t, "application/json", a.header.Get("Content-Type"))
				assert.Equal(t, "1", a.header.Get("Retry-After"))
			}
			select {
			case a := <-first:
				t.Fatalf("the request holding the lock answered %d %s before its charge was released", a.status, a.body)
			default:
			}

			// Locks are per payment: another one is not held up.
			a := srv.post(t, "/payments/43/charge", `{"amount_cents": 500}`)
			require.Equal(t, http.StatusOK, a.status, a.body)

			close(release)
			a = recv(t, first, "the held request's answer")
			require.Equal(t, http.StatusOK, a.status, a.body)
			charged := decodeReceipt(t, a.body)
			assert.Equal(t, Receipt{PaymentID: "42", AmountCents: 1299, Receipt: charged.Receipt}, charged)

			// Second round, as soon as the answer came: the receipt was
			// recorded before it was sent, so the retry gets it again,
			// replayed, and charges nothing.
			a = srv.post(t, "/payments/42/charge", `{"amount_cents": 1299}`)
			require.Equal(t, http.StatusOK, a.status, a.body)
			assert.Equal(t, "true", a.header.Get(idempotency.ReplayedHeader))
			assert.Equal(t, charged, decodeReceipt(t, a.body))

			assert.Zero(t, ledger.Overlaps())
			assert.Zero(t, ledger.DoubleCharges())
			assert.Equal(t, 2, ledger.Charges())
		})
	}
}

// TestSimultaneousRequestsChargeExactlyOnce sends, in each of 5 bursts, 10
// requests for one payment at the same instant, and holds the charge open
// until all the others have been answered: exactly one request charges and
// the 9 others get 409, never an overlapping charge. (Lock attempts of one
// process on one name take turns, so simultaneous requests to one server
// cannot split the nodes so that none gets a majority.)
func TestSimultaneousRequestsChargeExactlyOnce(t *testing.T) {
	for name, nodes := range nodeSets() {
		t.Run(name, func(t *testing.T) {
			const bursts, requests = 5, 10
			entered := make(chan string, requests)
			release := make(chan struct{}, 1)
			ledger := &Ledger{Hold: func(ctx context.Context, id string) error {
				entered <- id
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}}
			srv := startServer(t, newPayments(t, nodes(t), ledger))
			for burst := range bursts {
				path := fmt.Sprintf("/payments/burst-%d/charge", burst)
				start := make(chan struct{})
				answers := make(chan answer, requests)
				for range requests {
					go func() {
						<-start
						answers <- srv.post(t, path, `{"amount_cents": 1299}`)
					}()
				}
				close(start)
				for range requests - 1 {
					a := recv(t, answers, "a 409")
					require.Equal(t, http.StatusConflict, a.status, "burst %d: %s", burst, a.body)
				}
				require.Equal(t, fmt.Sprintf("burst-%d", burst), recv(t, entered, "the one charge"))
				release <- struct{}{}
				a := recv(t, answers, "the charging request's answer")
				require.Equal(t, http.StatusOK, a.status, a.body)
				assert.Empty(t, a.header.Get(idempotency.ReplayedHeader))
			}
			assert.Zero(t, ledger.Overlaps())
			assert.Zero(t, ledger.DoubleCharges())
			assert.Equal(t, bursts, ledger.Charges())
		})
	}
}

// TestCancelledRequestStillReleases cancels a request while it holds the
// lock and checks that the next request for the payment gets 200 at once:
// the handler released the lock although its ctx was cancelled (the TTL of
// 10s would otherwise keep the payment locked).
func TestCancelledRequestStillReleases(t *testing.T) {
	entered := make(chan struct{}, 1)
	var hung atomic.Bool
	ledger := &Ledger{Hold: func(ctx context.Context, _ string) error {
		if hung.Swap(true) {
			return nil
		}
		entered <- struct{}{}
		<-ctx.Done() // the first charge hangs until its client gives up
		return ctx.Err()
	}}
	p := newPayments(t, embedded(t), ledger)
	srv := startServer(t, p)

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.base+"/payments/7/charge", strings.NewReader(`{"amount_cents": 100}`))
		if err == nil {
			var resp *http.Response
			if resp, err = srv.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		errc <- err
	}()
	recv(t, entered, "the charge")
	cancel()
	require.ErrorIs(t, recv(t, errc, "the cancelled request"), context.Canceled)
	waitHandled(t, srv, "/payments/7/charge")

	a := srv.post(t, "/payments/7/charge", `{"amount_cents": 100}`)
	require.Equal(t, http.StatusOK, a.status, a.body)
	assert.Empty(t, a.header.Get(idempotency.ReplayedHeader), "the cancelled charge must not be remembered")
	assert.Equal(t, 1, ledger.Charges(), "the cancelled charge must not have charged")
}

// TestMajorityDownIs503 stops 3 of 5 nodes (the kit's, or 2 of 3 real
// ones), or hangs 3 of 5, and checks that a charge gets 503 with its own JSON
// body, not a 409: no one else holds the payment, the lock service is down.
func TestMajorityDownIs503(t *testing.T) {
	for _, fault := range []struct {
		name   string
		inject func(*quorumlocktest.Nodes, int)
	}{{"stopped", (*quorumlocktest.Nodes).Stop}, {"hung", (*quorumlocktest.Nodes).Hang}} {
		t.Run(fault.name, func(t *testing.T) {
			nodes := quorumlocktest.Start(t, 5)
			srv := startServer(t, newPayments(t, open(t, strings.Join(nodes.URLs(), ",")), &Ledger{}))
			for i := range 3 {
				fault.inject(nodes, i)
			}
			assert503(t, srv)
		})
	}
	t.Run("redis", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		srv := startServer(t, newPayments(t, open(t, urls(servers)), &Ledger{}))
		servers[0].Kill()
		servers[1].Kill()
		assert503(t, srv)
	})
}

func assert503(t *testing.T, srv *server) {
	t.Helper()
	a := srv.post(t, "/payments/42/charge", `{"amount_cents": 1299}`)
	require.Equal(t, http.StatusServiceUnavailable, a.status, a.body)
	assert.JSONEq(t, `{"error":"the lock service is unavailable (too few lock nodes answered); try again","retry_after_ms":500}`, a.body)
	assert.Equal(t, "1", a.header.Get("Retry-After"))
}

// TestBadInputIs400 checks that invalid requests are refused with 400 and a
// JSON error before any lock is taken.
func TestBadInputIs400(t *testing.T) {
	ledger := &Ledger{}
	p := newPayments(t, embedded(t), ledger)
	for _, tc := range []struct {
		name, path, body string
		want             string // in the error message
	}{
		{"id with a dot", "/payments/4.2/charge", `{"amount_cents": 1}`, "invalid payment id"},
		{"id too long", "/payments/" + strings.Repeat("9", 65) + "/charge", `{"amount_cents": 1}`, "invalid payment id"},
		{"not JSON", "/payments/42/charge", `amount=1`, "invalid body"},
		{"empty body", "/payments/42/charge", ``, "invalid body"},
		{"unknown field", "/payments/42/charge", `{"amount": 1}`, "invalid body"},
		{"zero amount", "/payments/42/charge", `{"amount_cents": 0}`, "must be positive"},
		{"negative amount", "/payments/42/charge", `{"amount_cents": -5}`, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			p.Routes().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body)))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			var e apiError
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e))
			assert.Contains(t, e.Error, tc.want)
		})
	}
	rec := httptest.NewRecorder()
	p.Routes().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/payments/42/charge", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Zero(t, ledger.Charges())
}

// nodeSets returns the node sets the main tests run on, by subtest name.
func nodeSets() map[string]func(t *testing.T) *redlock.Redlock {
	return map[string]func(t *testing.T) *redlock.Redlock{
		"embedded": embedded,
		"redis": func(t *testing.T) *redlock.Redlock {
			return open(t, urls(redistest.Start(t, 3)))
		},
	}
}

// embedded returns a set of 5 embedded nodes, as the program uses by default.
func embedded(t *testing.T) *redlock.Redlock { return open(t, "") }

// open returns the node set the program would use with -nodes urls, through
// the same code path (demo.Nodes, so redlock.NewFromURLs when urls is set).
func open(t *testing.T, urls string) *redlock.Redlock {
	t.Helper()
	rs, stop, err := demo.Nodes(t.Context(), urls, 5, lockOptions...)
	require.NoError(t, err)
	t.Cleanup(stop)
	return rs
}

func urls(servers []*redistest.Server) string {
	var list []string
	for _, a := range redistest.Addrs(servers) {
		list = append(list, "redis://"+a)
	}
	return strings.Join(list, ",")
}

func newPayments(t *testing.T, rs *redlock.Redlock, ledger *Ledger) *Payments {
	return &Payments{
		Locks:      rs,
		Ledger:     ledger,
		TTL:        10 * time.Second,
		RetryAfter: 500 * time.Millisecond,
		Log:        log.New(t.Output(), "server: ", 0),
	}
}

// server is a running Payments server and a client for it.
type server struct {
	base    string
	client  *http.Client
	handled chan string // the path of each request whose handler returned
}

// startServer serves p on a free loopback port until the test ends.
func startServer(t *testing.T, p *Payments) *server {
	t.Helper()
	handled := make(chan string, 64)
	routes := p.Routes()
	base, shutdown, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routes.ServeHTTP(w, r)
		select {
		case handled <- r.URL.Path:
		default:
		}
	}))
	require.NoError(t, err)
	client, closeClient := newClient()
	t.Cleanup(func() {
		closeClient()
		shutdown()
	})
	return &server{base: base, client: client, handled: handled}
}

// answer is an HTTP reply.
type answer struct {
	status int
	header http.Header
	body   string
}

// post sends a charge request and returns the reply; a transport error fails
// the test (post may run on other goroutines, so it uses Errorf).
func (s *server) post(t *testing.T, path, body string) answer {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return answer{}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return answer{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("POST %s: reading the body: %v", path, err)
	}
	return answer{resp.StatusCode, resp.Header, strings.TrimSpace(string(b))}
}

// waitHandled waits until the handler of a request for path has returned, so
// its deferred release of the lock is done.
func waitHandled(t *testing.T, s *server, path string) {
	t.Helper()
	require.Equal(t, path, recv(t, s.handled, "the end of a handler for "+path))
}

func decodeReceipt(t *testing.T, body string) Receipt {
	t.Helper()
	var r Receipt
	require.NoError(t, json.Unmarshal([]byte(body), &r), body)
	return r
}

// recv receives from c, failing the test if nothing comes within wait.
func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestDuplicatesWithANodeDownGet409 stops one of three nodes (the kit's, and
// real ones) and checks
// that a duplicate still gets 409, not 503: both when the charge in progress
// holds the other two nodes, and when the votes split (another server's
// attempt took one node, this one the other: yes=1 no=1 failed=1), which is
// contention for the payment, not a lock service outage.
func TestDuplicatesWithANodeDownGet409(t *testing.T) {
	t.Run("kit", func(t *testing.T) {
		nodes := quorumlocktest.Start(t, 3)
		opt, err := redis.ParseURL(nodes.URLs()[1])
		require.NoError(t, err)
		admin := redis.NewClient(opt)
		t.Cleanup(func() { _ = admin.Close() })
		duplicatesWithANodeDown(t, nodes.URLs(), func() { nodes.Stop(2) }, admin)
	})
	t.Run("redis", func(t *testing.T) {
		servers := redistest.Start(t, 3)
		duplicatesWithANodeDown(t, strings.Split(urls(servers), ","), servers[2].Kill, servers[1].Client(t))
	})
}

// duplicatesWithANodeDown runs TestDuplicatesWithANodeDownGet409 on three
// nodes: stop stops the third, admin is a client of the second.
func duplicatesWithANodeDown(t *testing.T, nodes []string, stop func(), admin *redis.Client) {
	ledger, entered, release := holdingLedger("42", 1)
	srv := startServer(t, newPayments(t, open(t, strings.Join(nodes, ",")), ledger))
	stop()

	// A charge in progress holds nodes 0 and 1.
	first := make(chan answer, 1)
	go func() { first <- srv.post(t, "/payments/42/charge", `{"amount_cents": 1299}`) }()
	recv(t, entered, "the first request entering the charge")
	a := srv.post(t, "/payments/42/charge", `{"amount_cents": 1299}`)
	require.Equal(t, http.StatusConflict, a.status, a.body)
	close(release)
	a = recv(t, first, "the held request's answer")
	require.Equal(t, http.StatusOK, a.status, a.body)

	// Another server's attempt at payment 43 took node 1 at the same
	// instant as this one took node 0.
	require.NoError(t, admin.Set(t.Context(), "http409:payment:43", "other-server", 10*time.Second).Err())
	a = srv.post(t, "/payments/43/charge", `{"amount_cents": 500}`)
	require.Equal(t, http.StatusConflict, a.status, "a split vote is contention: %s", a.body)
	assert.JSONEq(t, `{"error":"payment 43 is already being processed","retry_after_ms":500}`, a.body)
	// The other server's attempt rolls back; the retry goes through.
	require.NoError(t, admin.Del(t.Context(), "http409:payment:43").Err())
	a = srv.post(t, "/payments/43/charge", `{"amount_cents": 500}`)
	require.Equal(t, http.StatusOK, a.status, a.body)
	assert.Zero(t, ledger.Overlaps())
}

// holdingLedger returns a ledger whose charges of payment id signal entered
// (buffered to n) and then wait until release is closed or their ctx ends.
func holdingLedger(id string, n int) (ledger *Ledger, entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, n), make(chan struct{})
	return &Ledger{Hold: func(ctx context.Context, got string) error {
		if got != id {
			return nil
		}
		entered <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}, entered, release
}
