// Command http409 shows a payment endpoint that charges each payment once,
// even when the request is sent twice: POST /payments/{id}/charge runs
// through an idempotency.Store keyed by the payment. A second request while
// the charge runs (a double click, a client retrying too early, another
// server behind the same load balancer) is answered 409 Conflict at once,
// with a JSON body saying so; a retry after the charge, on any server
// sharing the lock nodes, gets the same receipt again, marked
// Idempotent-Replayed: true, and charges nothing. Failing lock nodes give
// 503, bad input 400, the same payment with another amount 422.
//
// The program starts two server processes (this program again, each with
// its own clients of the nodes) on free loopback ports, and the fake payment
// provider they both call; it sends the first server a request to charge
// a new payment and, while that charge runs, 9 more for the same payment at
// once, to both; it prints how many got 200 and how many 409, retries on the
// second server once the charge is done, and exits. The provider remembers
// nothing: it counts charges, so a double charge would show:
//
//	go run ./examples/http409
//	go run ./examples/http409 -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//
// Without -nodes it uses 5 embedded Redis nodes started in the process.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	if os.Getenv(envServe) != "" { // a server process started by run
		os.Exit(serveMain())
	}
	// A service routes go-redis's own messages to its log (see
	// docs/operations.md, "Logging").
	redis.SetLogger(demo.RedisLog{Logger: slog.Default()})
	nodes := demo.NodesFlag()
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "http409:", err)
		os.Exit(1)
	}
}

// lockOptions configure the node set. The per-node timeout is raised from the
// 100ms the 10s TTL implies to a second: a burst of requests on a cold server
// opens a new connection to every node per request, and on a small, loaded
// machine (or under the race detector, or with the embedded nodes, which run
// each lock script in a Lua interpreter written in Go) that can take longer
// than 100ms, which would turn a 409 into a 503. Only a node that accepts
// connections but does not answer costs the full timeout; a stopped one is
// refused at once.
var lockOptions = []redlock.Option{
	redlock.WithKeyPrefix("http409:"),
	redlock.WithNodeTimeout(time.Second),
}

// run starts two server processes over the nodes at urls (embedded ones if empty),
// plays the two rounds of requests, prints what happened to out, and returns
// an error if the outcome is not one 200 and the rest 409, then the same
// receipt replayed by the other server, with one charge made and none
// overlapping.
func run(ctx context.Context, out io.Writer, urls string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, stopNodes, err := demo.URLs(urls, 5)
	if err != nil {
		return err
	}
	defer stopNodes()

	const requests = 10
	charging := make(chan struct{})       // closed when the first request is inside the charge
	othersAnswered := make(chan struct{}) // closed when the duplicates have their answers
	var once sync.Once
	ledger := &Ledger{Hold: func(ctx context.Context, _ string) error {
		// A real charge waits for the payment provider. This one waits until
		// the duplicates sent meanwhile have been answered.
		once.Do(func() { close(charging) })
		select {
		case <-othersAnswered:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}}
	provider, stopProvider, err := serve(ProviderHandler(ledger))
	if err != nil {
		return err
	}
	defer stopProvider()
	var bases [2]string
	for i := range bases {
		srv, err := startServerProcess(fmt.Sprintf("server %d", i+1), list, provider, out)
		if err != nil {
			return err
		}
		defer srv.close()
		bases[i] = srv.base
	}
	fmt.Fprintf(out, "%d lock nodes; a lock needs %d of them\n", len(list), len(list)/2+1)
	client, closeClient := newClient()
	defer closeClient()
	// A payment of its own per run: the nodes remember a charged one for 24h
	// (a second run with -nodes would otherwise find it charged already).
	path := fmt.Sprintf("/payments/%d/charge", time.Now().UnixMilli())
	fmt.Fprintf(out, "servers listening on %s and %s\n\n", bases[0], bases[1])

	// Round 1: a request starts charging the payment; while it runs, the
	// duplicates arrive at both servers, all at once.
	fmt.Fprintf(out, "round 1: POST %s to server 1, and while it is charging, %d more for the same payment at once, to both servers\n", path, requests-1)
	type answer struct {
		status int
		body   string
	}
	send := func(server int) answer {
		status, _, body, err := post(ctx, client, bases[server]+path, `{"amount_cents": 1299}`)
		if err != nil {
			return answer{0, err.Error()}
		}
		return answer{status, body}
	}
	firstDone := make(chan answer, 1)
	go func() { firstDone <- send(0) }()
	var first answer
	select {
	case <-charging:
	case first = <-firstDone:
		return fmt.Errorf("the first request did not start a charge: %d %s", first.status, first.body)
	}
	answers := make([]answer, requests-1)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = send(i % 2) })
	}
	wg.Wait()
	close(othersAnswered)
	first = <-firstDone
	byStatus := map[int][]string{first.status: {first.body}}
	for _, a := range answers {
		byStatus[a.status] = append(byStatus[a.status], a.body)
	}
	for _, status := range []int{http.StatusOK, http.StatusConflict, http.StatusServiceUnavailable, http.StatusInternalServerError, 0} {
		if bodies := byStatus[status]; len(bodies) > 0 {
			fmt.Fprintf(out, "   %3d %-12s x%-2d %s\n", status, http.StatusText(status), len(bodies), bodies[0])
		}
	}

	// Round 2: the charge is over; a retry on the other server gets the
	// same receipt, replayed, and charges nothing.
	status, header, body, err := post(ctx, client, bases[1]+path, `{"amount_cents": 1299}`)
	if err != nil {
		return err
	}
	replayed := header.Get(idempotency.ReplayedHeader)
	fmt.Fprintf(out, "round 2, after the charge finished, to server 2:\n   %3d %-12s     %s (%s: %s)\n\n", status, http.StatusText(status), body, idempotency.ReplayedHeader, replayed)

	ok, conflicts := len(byStatus[http.StatusOK]), len(byStatus[http.StatusConflict])
	fmt.Fprintf(out, "summary: %d request charged the payment and %d got 409 Conflict while it ran; the retry got %d, replayed; charges: %d, double charges: %d, overlapping charges: %d\n",
		ok, conflicts, status, ledger.Charges(), ledger.DoubleCharges(), ledger.Overlaps())
	if ok != 1 || conflicts != requests-1 || status != http.StatusOK || replayed != "true" || body != first.body ||
		ledger.Charges() != 1 || ledger.DoubleCharges() != 0 || ledger.Overlaps() != 0 {
		return errors.New("unexpected outcome")
	}
	return nil
}

// serve serves h on a free loopback port until shutdown, which waits for the
// requests in progress and for the server's goroutine.
func serve(h http.Handler) (baseURL string, shutdown func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // ends with http.ErrServerClosed at Shutdown
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
	}, nil
}

// newClient returns an HTTP client with its own connection pool, and a
// function that closes the pool's idle connections.
func newClient() (*http.Client, func()) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr.CloseIdleConnections
}

// post sends body as JSON to url and returns the status, the headers and the
// body, without its trailing newline.
func post(ctx context.Context, c *http.Client, url, body string) (int, http.Header, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, strings.TrimSpace(string(b)), err
}
