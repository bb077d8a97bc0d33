package idempotency_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// reply is what a client received.
type reply struct {
	status int
	header http.Header
	body   string
}

// send makes a request to srv with key (none if "") and body.
func send(t *testing.T, srv *httptest.Server, method, path, key, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set(idempotency.KeyHeader, key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// requireProblem checks a JSON problem answer of status.
func requireProblem(t *testing.T, r reply, status int) {
	t.Helper()
	require.Equal(t, status, r.status, r.body)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	var p struct {
		Title  string
		Status int
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Title)
}

// charge is a handler that counts its runs and answers 201 with headers.
type charge struct {
	runs  atomic.Int32
	block chan struct{} // if not nil, each run waits for it to close
	start chan struct{} // if not nil, told when a run starts
}

func (c *charge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	if c.start != nil {
		c.start <- struct{}{}
	}
	if c.block != nil {
		<-c.block
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/1")
	w.Header().Set("X-Run", string(rune('0'+n)))
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"charged":`+string(body)+`}`)
}

// instances returns two HTTP servers (two instances) over the same nodes,
// each with its own Redlock and Store, in front of h.
func instances(t *testing.T, nodes []*redistest.Server, h http.Handler, store []idempotency.Option, opts ...idempotency.HTTPOption) (a, b *httptest.Server) {
	t.Helper()
	mk := func() *httptest.Server {
		srv := httptest.NewServer(idempotency.Middleware(idempotency.New(newRedlock(t, nodes), store...), opts...)(h))
		t.Cleanup(srv.Close)
		return srv
	}
	return mk(), mk()
}

func TestMiddlewareReplaysTheSameKey(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	a, b := instances(t, nodes, h, nil)
	first := send(t, a, "POST", "/charges", "key-1", "42")
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, `{"charged":42}`, first.body)
	require.Empty(t, first.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, "1", first.header.Get("X-Run"))

	for _, srv := range []*httptest.Server{b, a} {
		again := send(t, srv, "POST", "/charges", `"key-1"`, "42") // the draft's quoted form
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, "application/json", again.header.Get("Content-Type"))
		require.Equal(t, "/charges/1", again.header.Get("Location"))
		require.Empty(t, again.header.Get("X-Run"), "a header not chosen is not replayed")
	}
	require.Equal(t, int32(1), h.runs.Load())

	// Same key, another body or path: 422, not run.
	requireProblem(t, send(t, b, "POST", "/charges", "key-1", "43"), http.StatusUnprocessableEntity)
	requireProblem(t, send(t, b, "POST", "/refunds", "key-1", "42"), http.StatusUnprocessableEntity)
	require.Equal(t, int32(1), h.runs.Load())
}

// WithReplayHeaders chooses the headers replayed: those named, in any case,
// and no default one left out.
func TestMiddlewareReplayHeaders(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	a, b := instances(t, nodes, h, nil, idempotency.WithReplayHeaders("x-run", "Location"))
	first := send(t, a, "POST", "/charges", "key-1", "42")
	require.Equal(t, http.StatusCreated, first.status)
	again := send(t, b, "POST", "/charges", "key-1", "42")
	require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, first.body, again.body)
	require.Equal(t, "1", again.header.Get("X-Run"))
	require.Equal(t, "/charges/1", again.header.Get("Location"))
	require.NotEqual(t, "application/json", again.header.Get("Content-Type"), "a default not named is not replayed")
	require.Equal(t, int32(1), h.runs.Load())
}

// With WithKeyScope, a key is its client's: another client sending the
// same key and request runs its own, and replays only its own; a scope
// that ends like a key's start does not meet another ("a:b"+"c", "a"+"b:c").
func TestMiddlewareKeyScope(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	a, b := instances(t, nodes, h, nil, idempotency.WithKeyScope(func(r *http.Request) string { return r.Header.Get("Authorization") }))
	for i, c := range []struct{ who, key string }{{"alice", "order-1"}, {"bob", "order-1"}, {"a:b", "c"}, {"a", "b:c"}} {
		first := send(t, a, "POST", "/charges", c.key, "5", "Authorization", c.who)
		require.Equal(t, http.StatusCreated, first.status)
		require.Empty(t, first.header.Get(idempotency.ReplayedHeader), "%s's key %q is its own", c.who, c.key)
		require.Equal(t, int32(i+1), h.runs.Load())
		again := send(t, b, "POST", "/charges", c.key, "5", "Authorization", c.who)
		require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
		require.Equal(t, first.body, again.body)
	}
}

func TestMiddlewareConflictWhileInProgress(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{block: make(chan struct{}), start: make(chan struct{}, 1)}
	a, b := instances(t, nodes, h, nil, idempotency.WithRetryAfter(3*time.Second))
	var wg sync.WaitGroup
	var first reply
	wg.Go(func() { first = send(t, a, "POST", "/charges", "k", "1") })
	<-h.start
	dup := send(t, b, "POST", "/charges", "k", "1")
	requireProblem(t, dup, http.StatusConflict)
	require.Equal(t, "3", dup.header.Get("Retry-After"))
	close(h.block)
	wg.Wait()
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, "true", send(t, b, "POST", "/charges", "k", "1").header.Get(idempotency.ReplayedHeader))
	require.Equal(t, int32(1), h.runs.Load())
}

func TestMiddlewareWithoutKey(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	a, _ := instances(t, nodes, h, nil)
	for range 2 {
		r := send(t, a, "POST", "/charges", "", "1")
		require.Equal(t, http.StatusCreated, r.status)
		require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
	}
	require.Equal(t, int32(2), h.runs.Load(), "requests without a key pass through")

	required, _ := instances(t, nodes, h, nil, idempotency.WithKeyRequired(), idempotency.WithMaxRequestBody(4))
	requireProblem(t, send(t, required, "POST", "/charges", "", "1"), http.StatusBadRequest)
	requireProblem(t, send(t, required, "POST", "/charges", strings.Repeat("k", idempotency.MaxKeyLen+1), "1"), http.StatusBadRequest)
	requireProblem(t, send(t, required, "POST", "/charges", "k1", "1", idempotency.KeyHeader, "k2"), http.StatusBadRequest)
	requireProblem(t, send(t, required, "POST", "/charges", "k", "12345"), http.StatusRequestEntityTooLarge)
	require.Equal(t, int32(2), h.runs.Load())
}

func TestMiddlewareNodesUnavailable(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	a, _ := instances(t, nodes, h, nil)
	nodes[1].Kill()
	nodes[2].Kill()
	r := send(t, a, "POST", "/charges", "k", "1")
	requireProblem(t, r, http.StatusServiceUnavailable)
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Zero(t, h.runs.Load())
}

// Server errors are not remembered: a retry runs the handler again.
func TestMiddlewareForgetsServerErrors(t *testing.T) {
	nodes := redistest.Start(t, 3)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "upstream down", http.StatusBadGateway)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	a, b := instances(t, nodes, h, nil)
	require.Equal(t, http.StatusBadGateway, send(t, a, "POST", "/", "k", "").status)
	r := send(t, b, "POST", "/", "k", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
	r = send(t, a, "POST", "/", "k", "")
	require.Equal(t, "true", r.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, "ok", r.body)
	require.Equal(t, int32(2), runs.Load())
}

// A response too large to remember is sent in full once; its key then
// replays a problem that says so, and never runs again.
func TestMiddlewareResponseTooLarge(t *testing.T) {
	nodes := redistest.Start(t, 3)
	var runs atomic.Int32
	big := strings.Repeat("x", 10_000)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		for i := 0; i < len(big); i += 1000 {
			_, _ = io.WriteString(w, big[i:i+1000])
		}
	})
	// A limit smaller than the stand-in itself still remembers the stand-in.
	for i, limit := range []int{4096, 100} {
		a, b := instances(t, nodes, h, []idempotency.Option{idempotency.WithMaxResponse(limit)})
		key := strconv.Itoa(limit)
		r := send(t, a, "POST", "/", key, "")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, big, r.body)
		again := send(t, b, "POST", "/", key, "")
		requireProblem(t, again, http.StatusInternalServerError)
		assert.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
		assert.Contains(t, again.body, "too large to replay")
		require.Equal(t, int32(i+1), runs.Load(), "limit %d", limit)
	}
}

// WithMaxResponse bounds the body, as its name says, not the status and
// headers kept with it: a body of exactly the limit is replayed as sent. It
// used to be sent once, then replayed as a 500 saying it was over the limit.
func TestMiddlewareReplaysABodyOfTheLimit(t *testing.T) {
	nodes := redistest.Start(t, 3)
	var runs atomic.Int32
	body := strings.Repeat("y", 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		_, _ = io.WriteString(w, body)
	})
	a, b := instances(t, nodes, h, []idempotency.Option{idempotency.WithMaxResponse(len(body))})
	require.Equal(t, body, send(t, a, "POST", "/", "k", "").body)
	again := send(t, b, "POST", "/", "k", "")
	require.Equal(t, http.StatusOK, again.status)
	assert.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
	assert.Equal(t, body, again.body)
	assert.Equal(t, int32(1), runs.Load())
}

// A handler that returns without answering after the request's ctx ended
// (the client left) is not remembered as an empty 200: the retry runs it.
func TestMiddlewareForgetsAnAbandonedRequest(t *testing.T) {
	nodes := redistest.Start(t, 3)
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-r.Context().Done() // the work waits, the client gives up
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	a, _ := instances(t, nodes, h, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", a.URL+"/", strings.NewReader(""))
	require.NoError(t, err)
	req.Header.Set(idempotency.KeyHeader, "k")
	_, err = a.Client().Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var r reply
	require.Eventually(t, func() bool { // until the first request's lock is released
		r = send(t, a, "POST", "/", "k", "")
		return r.status != http.StatusConflict
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, "charged", r.body)
	require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, int32(2), runs.Load())
}

// Keys the Store refuses are a 400, and an unlimited request body
// (math.MaxInt64) is read in full.
func TestMiddlewareKeysAndBodyLimits(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	a, _ := instances(t, nodes, h, nil, idempotency.WithMaxRequestBody(math.MaxInt64))
	requireProblem(t, send(t, a, "POST", "/", "x:quorumlock:idem", "1"), http.StatusBadRequest)
	require.Zero(t, h.runs.Load())
	r := send(t, a, "POST", "/", "k", "10")
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, `{"charged":10}`, r.body)
	requireProblem(t, send(t, a, "POST", "/", "k", "20"), http.StatusUnprocessableEntity)
}

// A response the nodes could not record is sent as the handler wrote it:
// the handler ran, and the client is told what it did.
func TestMiddlewareSendsAResponseNotRecorded(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nodes[1].Kill()
		nodes[2].Kill()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	})
	a, _ := instances(t, nodes, h, nil)
	r := send(t, a, "POST", "/", "k", "")
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, "charged", r.body)
	require.Empty(t, r.header.Get(idempotency.ReplayedHeader))
}

// Invalid middleware options answer every keyed request with a 500
// problem that names them, and run nothing.
func TestMiddlewareRefusesBadOptions(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	for _, opt := range []idempotency.HTTPOption{idempotency.WithRemember(nil), idempotency.WithMaxRequestBody(-1), idempotency.WithRetryAfter(-time.Second)} {
		a, _ := instances(t, nodes, h, nil, opt)
		r := send(t, a, "POST", "/", "k", "")
		requireProblem(t, r, http.StatusInternalServerError)
		require.Contains(t, r.body, "Middleware")
	}
	require.Zero(t, h.runs.Load())
}

// Malformed Idempotency-Key values (the draft's sf-string broken, bytes
// that are not printable ASCII) are a 400 naming the fault; the handler
// does not run and nothing is sent to the nodes. The quoted and bare forms
// of one key are the same key. Sent to the handler directly: Go's HTTP
// client refuses control bytes in headers, other clients and proxies may not.
func TestMiddlewareRefusesMalformedKeys(t *testing.T) {
	nodes := redistest.Start(t, 3)
	h := &charge{}
	mw := idempotency.Middleware(idempotency.New(newRedlock(t, nodes)))(h)
	serve := func(key string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(t.Context(), "POST", "/", strings.NewReader("1"))
		req.Header.Set(idempotency.KeyHeader, key)
		mw.ServeHTTP(rec, req)
		return rec
	}
	for key, want := range map[string]string{
		`"unterminated`:   "no closing quote",
		`"ends escaped\"`: "no closing quote",
		"k\x01":           "byte 0x01 at 1",
		`"k` + "\x7f\"":   "byte 0x7f at 2",
		"k\xc3\xa9":       "byte 0xc3 at 1",
		`"a\nb"`:          "escapes only",
		`"a"b`:            "text after the closing quote",
		`"a";p=1`:         "text after the closing quote",
		`"a", "b"`:        "text after the closing quote",
		`ab"c`:            "at 2 of a bare Idempotency-Key",
		"a, b":            "a ',' at 1 of a bare Idempotency-Key", // two header lines, joined
	} {
		rec := serve(key)
		r := reply{rec.Code, rec.Header(), rec.Body.String()}
		requireProblem(t, r, http.StatusBadRequest)
		require.Contains(t, r.body, want, "key %q", key)
	}
	require.Zero(t, h.runs.Load())
	for _, s := range nodes {
		require.Zero(t, s.Do(t, "DBSIZE"), "nothing written")
		require.NotContains(t, s.Do(t, "INFO", "commandstats"), "cmdstat_eval", "nothing sent")
	}

	require.Equal(t, http.StatusCreated, serve(`"a key\\"`).Code)
	for _, same := range []string{`a key\`, ` "a key\\" `} {
		rec := serve(same)
		require.Equal(t, http.StatusCreated, rec.Code, "key %q", same)
		require.Equal(t, "true", rec.Header().Get(idempotency.ReplayedHeader), "key %q is the same key", same)
	}
	require.Equal(t, http.StatusCreated, serve(`"a \"quoted\" key"`).Code)
	require.Equal(t, int32(2), h.runs.Load())
	require.GreaterOrEqual(t, recordsOn(t, nodes, `a "quoted" key`), 2, "the escapes are undone")
}
