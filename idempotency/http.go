package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
)

// Header names of the middleware.
const (
	KeyHeader      = "Idempotency-Key"     // the request's key: printable ASCII, quoted (the draft's sf-string) or bare
	ReplayedHeader = "Idempotent-Replayed" // "true" on a replayed response
)

// Middleware returns HTTP middleware that runs each request with an
// Idempotency-Key header through s.Do (the request: method, path with query,
// body): the handler runs at most once per key, and later requests get its
// status, chosen headers and body, with Idempotent-Replayed: true. Other
// answers are JSON problems: 409 (Retry-After) while the key runs, 422 for a
// key used with another request, 400 for a bad key or (WithKeyRequired)
// none, 413 for a body over the limit, 503 (Retry-After) when too few nodes
// answered or the request's ctx ended first, 500 otherwise. Requests without
// the header pass through. Statuses from 500 and handlers that wrote nothing
// after the request's ctx ended are not remembered; a response whose body is
// over WithMaxResponse is sent once, then replayed as a 500 problem
// (docs/design.md, "Idempotency").
func Middleware(s *Store, opts ...HTTPOption) func(http.Handler) http.Handler {
	cfg := httpConfig{
		retryAfter: time.Second,
		maxBody:    1 << 20,
		remember:   func(status int) bool { return status < 500 },
		headers:    []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "ETag", "Last-Modified"},
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	bad := cfg.check()
	return func(next http.Handler) http.Handler {
		bad := bad
		if bad == nil && next == nil {
			bad = invalid("idempotency: Middleware: nil http.Handler to wrap")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if bad != nil {
				problem(w, http.StatusInternalServerError, "Misconfigured idempotency middleware", bad.Error()+"; the request was not run")
				return
			}
			cfg.serve(s, next, w, r)
		})
	}
}

func (c *httpConfig) check() error {
	switch {
	case c.remember == nil:
		return invalid("idempotency: Middleware: nil WithRemember func")
	case c.maxBody < 0:
		return invalid("idempotency: Middleware: negative max request body %d", c.maxBody)
	case c.retryAfter < 0:
		return invalid("idempotency: Middleware: negative Retry-After %v", c.retryAfter)
	}
	return nil
}

// HTTPOption configures Middleware.
type HTTPOption func(*httpConfig)

type httpConfig struct {
	required   bool
	retryAfter time.Duration
	maxBody    int64
	remember   func(status int) bool
	headers    []string
	scope      func(*http.Request) string
}

// WithKeyRequired makes requests without an Idempotency-Key fail with 400
// instead of passing through.
func WithKeyRequired() HTTPOption { return func(c *httpConfig) { c.required = true } }

// WithRetryAfter sets the Retry-After of 409 and 503 answers, in whole
// seconds, default 1s.
func WithRetryAfter(d time.Duration) HTTPOption { return func(c *httpConfig) { c.retryAfter = d } }

// WithMaxRequestBody sets the largest request body read, in bytes, default
// 1 MiB; a larger one is refused with 413 and the handler does not run.
func WithMaxRequestBody(n int64) HTTPOption { return func(c *httpConfig) { c.maxBody = n } }

// WithRemember sets which statuses are remembered and replayed; default:
// those under 500. A response not remembered leaves the key free.
func WithRemember(f func(status int) bool) HTTPOption { return func(c *httpConfig) { c.remember = f } }

// WithReplayHeaders sets the response headers remembered and replayed,
// default Content-Type, Content-Encoding, Content-Language, Location, ETag
// and Last-Modified.
func WithReplayHeaders(names ...string) HTTPOption {
	return func(c *httpConfig) { c.headers = names }
}

// WithKeyScope makes the key of each request its client's: scope names the
// client (the authenticated account, say), and keys of different scopes
// never share a record (the scope counts towards MaxKeyLen). Without it (or
// with nil), keys are shared by every client: one that sends another's key
// and request gets that client's response.
func WithKeyScope(scope func(r *http.Request) string) HTTPOption {
	return func(c *httpConfig) { c.scope = scope }
}

// errForgotten is the work's error for a response not to remember.
var errForgotten = errors.New("idempotency: response not remembered")

// errAbandoned is the work's error when the handler wrote no response and
// the request's ctx had ended.
var errAbandoned = errors.New("idempotency: the handler returned without a response after the request's context ended")

func (c *httpConfig) serve(s *Store, next http.Handler, w http.ResponseWriter, r *http.Request) {
	values := r.Header.Values(KeyHeader)
	if len(values) == 0 {
		if c.required {
			problem(w, http.StatusBadRequest, "Idempotency-Key required", "this endpoint needs an Idempotency-Key header")
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	if err := s.unusable(); err != nil {
		problem(w, http.StatusInternalServerError, "Misconfigured idempotency middleware", err.Error()+"; the request was not run")
		return
	}
	key, err := parseKey(values[0])
	if err == nil && (len(values) > 1 || key == "" || len(key) > MaxKeyLen) {
		err = fmt.Errorf("one Idempotency-Key of 1 to %d bytes is needed", MaxKeyLen)
	} else if err == nil {
		if c.scope != nil { // the scope's length first: "a:b"+"c" is not "a"+"b:c"
			scope := c.scope(r)
			key = fmt.Sprintf("%d:%s:%s", len(scope), scope, key)
		}
		err = s.checkKey(key)
	}
	if err != nil {
		problem(w, http.StatusBadRequest, "Bad Idempotency-Key", err.Error())
		return
	}
	readLimit := c.maxBody
	if readLimit < math.MaxInt64 {
		readLimit++ // one byte more tells a body over the limit
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, readLimit))
	if err != nil {
		problem(w, http.StatusBadRequest, "Unreadable body", err.Error())
		return
	}
	if int64(len(body)) > c.maxBody {
		problem(w, http.StatusRequestEntityTooLarge, "Request body too large", fmt.Sprintf("the body is over %d bytes", c.maxBody))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	request := append([]byte(r.Method+" "+r.URL.RequestURI()+"\n"), body...)
	var rec *recorder
	standIn := c.encode(tooLarge(s.cfg.maxResp))
	// The stand-in of a response too large is remembered whatever the limit.
	resp, replayed, err := s.do(r.Context(), key, request, func(ctx context.Context) ([]byte, error) {
		rec = &recorder{w: w, header: http.Header{}, limit: s.cfg.maxResp}
		next.ServeHTTP(rec, r.WithContext(ctx))
		if rec.status == 0 && ctx.Err() != nil {
			// The handler gave up without answering (the client left, a
			// deadline): whether the work was done is unknown to us, so
			// nothing is remembered and a retry runs it.
			return nil, errAbandoned
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if !c.remember(rec.status) {
			return nil, errForgotten
		}
		if rec.streamed {
			return standIn, nil // sent, but too large to replay
		}
		return c.encode(rec), nil
	}, math.MaxInt) // WithMaxResponse bounds the body (the recorder); the status and kept headers come on top
	switch {
	case errors.Is(err, errAbandoned):
		c.retryLater(w)
		problem(w, http.StatusServiceUnavailable, "Request abandoned", "the request's context ended before the handler answered; nothing was remembered, and a retry runs it")
	case rec != nil && (err == nil && !replayed || errors.Is(err, errForgotten) || errors.Is(err, ErrNotRecorded)):
		rec.send()
	case err == nil:
		c.replay(w, resp)
	case errors.Is(err, ErrInProgress):
		c.retryLater(w)
		problem(w, http.StatusConflict, "Request in progress", "a request with this Idempotency-Key is being processed; retry later")
	case errors.Is(err, ErrKeyReused):
		problem(w, http.StatusUnprocessableEntity, "Idempotency-Key reused", "this Idempotency-Key was used with a different request")
	case errors.Is(err, mutex.ErrNodesUnavailable) || errors.Is(err, mutex.ErrNotObtained) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		c.retryLater(w)
		problem(w, http.StatusServiceUnavailable, "Service unavailable", "whether this request was processed cannot be told now; it was not run")
	case rec == nil:
		problem(w, http.StatusInternalServerError, "Internal error", "the request was not run")
	default:
		rec.send() // the handler ran; say what it said
	}
}

// parseKey returns the key of an Idempotency-Key header value: the
// content of a quoted string, the draft's form (an RFC 8941 sf-string, with
// only \" and \\ escaped), or the value itself when bare; either way of
// printable ASCII (0x20-0x7E), no quote inside a bare one.
func parseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	quoted := strings.HasPrefix(v, `"`)
	var key strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#02x at %d: an Idempotency-Key is printable ASCII", c, i)
		case !quoted && (c == '"' || c == ','): // a comma joins two header lines into one
			return "", fmt.Errorf("a %q at %d of a bare Idempotency-Key (one key per request); quote the whole key, as in \"abc\"", c, i)
		case !quoted:
			key.WriteByte(c)
		case i == 0:
		case c == '\\' && i+1 < len(v) && (v[i+1] == '"' || v[i+1] == '\\'):
			i++
			key.WriteByte(v[i])
		case c == '\\':
			return "", fmt.Errorf("a backslash at %d of a quoted Idempotency-Key escapes only \" or \\", i)
		case c == '"' && i < len(v)-1:
			return "", fmt.Errorf("text after the closing quote of the Idempotency-Key, at %d", i+1)
		case c == '"':
			return key.String(), nil
		default:
			key.WriteByte(c)
		}
	}
	if quoted {
		return "", errors.New("the quoted Idempotency-Key has no closing quote")
	}
	return key.String(), nil
}

func (c *httpConfig) retryLater(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(max(int(c.retryAfter/time.Second), 1)))
}

// stored is a remembered response: a JSON line of status and headers, then the body.
type stored struct {
	Status int         `json:"s"`
	Header http.Header `json:"h,omitempty"`
}

func (c *httpConfig) encode(rec *recorder) []byte {
	st := stored{Status: rec.status, Header: http.Header{}}
	for _, name := range c.headers {
		if v := rec.header.Values(name); len(v) > 0 {
			st.Header[http.CanonicalHeaderKey(name)] = v
		}
	}
	head, _ := json.Marshal(st) // cannot fail: ints and strings
	return append(append(head, '\n'), rec.body.Bytes()...)
}

func (c *httpConfig) replay(w http.ResponseWriter, resp []byte) {
	head, body, _ := bytes.Cut(resp, []byte("\n"))
	var st stored
	if err := json.Unmarshal(head, &st); err != nil || st.Status < 100 || st.Status > 999 {
		problem(w, http.StatusInternalServerError, "Unreadable record", "the response remembered for this Idempotency-Key cannot be read")
		return
	}
	maps.Copy(w.Header(), st.Header)
	w.Header().Set(ReplayedHeader, "true")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(st.Status)
	_, _ = w.Write(body)
}

// tooLarge is the stand-in remembered for a response over limit bytes.
func tooLarge(limit int) *recorder {
	rec := &recorder{status: http.StatusInternalServerError, header: http.Header{}}
	problem(rec, rec.status, "Response too large to replay",
		fmt.Sprintf("this request was processed, but its response body was over %d bytes and cannot be replayed", limit))
	return rec
}

func problem(w http.ResponseWriter, status int, title, detail string) {
	b, _ := json.Marshal(map[string]any{"type": "about:blank", "title": title, "status": status, "detail": detail})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// recorder keeps the handler's response to remember it; past limit bytes of
// body it sends what it kept to w and streams the rest (then only a
// stand-in can be remembered). A recorder without w only keeps.
type recorder struct {
	w        http.ResponseWriter
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int
	streamed bool // the response went out as written, past limit
	sent     bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	switch {
	case r.streamed:
		return r.w.Write(p)
	case r.w == nil || r.body.Len()+len(p) <= r.limit:
		return r.body.Write(p)
	}
	r.streamed = true
	r.send()
	return r.w.Write(p)
}

// send sends the response kept so far to the client, once.
func (r *recorder) send() {
	if r.sent {
		return
	}
	r.sent = true
	maps.Copy(r.w.Header(), r.header)
	r.w.WriteHeader(r.status)
	_, _ = r.w.Write(r.body.Bytes())
}
