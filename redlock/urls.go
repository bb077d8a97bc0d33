package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
)

// Client settings NewFromURLs applies when a URL does not set them itself.
const (
	// URLDialTimeout bounds a connection attempt.
	URLDialTimeout = time.Second
	// URLIOTimeout bounds each read and write on a connection: twice the
	// largest per-node timeout the library derives from a TTL (500ms), so a
	// command the lock has stopped waiting for still ends soon, freeing its
	// goroutine and its pooled connection.
	URLIOTimeout = time.Second
)

// NewFromURLs builds a node set from one URL per independent Redis primary,
// as redis.ParseURL reads them: redis://[user:password@]host:port[/db] for
// plain TCP, rediss:// for TLS (verified against the system's roots and the
// host name, or the tls.Config given with WithTLSConfig), with an ACL user and
// password when given. Timeouts given in a URL (dial_timeout, read_timeout,
// write_timeout, ...) are kept; unset ones are set for a lock: URLDialTimeout,
// URLIOTimeout, a single dial attempt and no command retries (a refused or
// lost node then fails with its real error at once, and the lock's own rounds
// decide what to retry).
//
// NewFromURLs pings every node in parallel, bounded by ctx and URLIOTimeout.
// If a majority answered, it returns a usable *Redlock; if some nodes did not
// answer, it returns it together with an error describing them (one
// *mutex.NodeError each), which callers should log: locking works as long as
// a majority answers. If no majority answered, or a URL is invalid, or an
// option is, it returns a nil *Redlock and the error (matching
// ErrNodesUnavailable, resp. ErrInvalid), having closed every client. Errors
// and Nodes name each node by its URL with the password replaced by "xxxxx";
// a password is never printed.
//
// Two URLs that reach the same redis-server under different names (localhost
// and 127.0.0.1, a DNS alias) are refused with ErrInvalid: that server would
// vote twice. They are told apart by the run_id in INFO server, so this check
// needs a user allowed to run INFO; without it, it is skipped.
//
// The *Redlock owns the clients it made: Close closes them.
func NewFromURLs(ctx context.Context, urls []string, opts ...Option) (*Redlock, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if len(urls) == 0 {
		return nil, invalid("redlock: no node URLs given")
	}
	if ctx == nil {
		return nil, invalid("redlock: nil context.Context; pass context.Background() or one with a deadline")
	}
	clients := make([]redis.UniversalClient, 0, len(urls))
	names := make([]string, len(urls))
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for i, raw := range urls {
		names[i] = redactURL(raw)
		o, err := redis.ParseURL(raw)
		if err != nil {
			closeAll()
			return nil, invalid("redlock: node %d (%s): %s", i, names[i], invalidURL(raw, err))
		}
		if o.TLSConfig != nil && cfg.tls != nil {
			t := cfg.tls.Clone()
			if t.ServerName == "" {
				t.ServerName = o.TLSConfig.ServerName
			}
			o.TLSConfig = t
		}
		if o.DialTimeout == 0 {
			o.DialTimeout = URLDialTimeout
		}
		if o.ReadTimeout == 0 {
			o.ReadTimeout = URLIOTimeout
		}
		if o.WriteTimeout == 0 {
			o.WriteTimeout = URLIOTimeout
		}
		if o.MaxRetries == 0 {
			o.MaxRetries = -1
		}
		if o.DialerRetries == 0 {
			o.DialerRetries = 1
		}
		clients = append(clients, redis.NewClient(o))
	}
	rs, err := New(clients, opts...)
	if err != nil {
		closeAll()
		return nil, scrubAll(err, urls)
	}
	rs.owned = clients
	for i, n := range rs.set.Nodes {
		n.SetAddr(names[i])
	}
	runIDs, err := rs.ping(ctx)
	if dup := sameServer(names, runIDs); dup != nil {
		_ = rs.Close()
		return nil, dup
	}
	if err != nil {
		if errors.Is(err, ErrNodesUnavailable) {
			_ = rs.Close()
			return nil, err
		}
		return rs, err
	}
	return rs, nil
}

// sameServer returns an ErrInvalid error if two URLs reach the same
// redis-server, told by its run_id (two names for one host, such as
// localhost and 127.0.0.1, pass the address check of New): that server would
// cast two votes, and a majority of the URLs would no longer be a majority of
// servers.
func sameServer(names, runIDs []string) error {
	first := map[string]int{}
	for i, id := range runIDs {
		if id == "" {
			continue
		}
		if j, ok := first[id]; ok {
			return invalid("redlock: node %d (%s) and node %d (%s) are the same redis-server (run_id %s): each node must be a separate server, or it votes twice", j, names[j], i, names[i], id)
		}
		first[id] = i
	}
	return nil
}

// ping asks every node PING in parallel, then the run_id of those that
// answered (INFO server; "" where INFO is refused or has none). The error is
// nil if all answered, one with a *mutex.NodeError per silent node
// otherwise, also matching ErrNodesUnavailable if no majority answered.
func (r *Redlock) ping(outer context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(outer, URLIOTimeout)
	defer cancel()
	errs := make([]error, len(r.set.Nodes))
	runIDs := make([]string, len(r.set.Nodes))
	done := make(chan struct{}, len(r.set.Nodes))
	for i, n := range r.set.Nodes {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := r.owned[i].Ping(ctx).Err(); err != nil {
				errs[i] = &mutex.NodeError{Node: n.Addr(), Err: err}
				return
			}
			if info, err := r.owned[i].Info(ctx, "server").Result(); err == nil {
				for line := range strings.Lines(info) {
					if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
						runIDs[i] = id
					}
				}
			}
		}()
	}
	for range r.set.Nodes {
		<-done
	}
	return runIDs, r.pingError(outer, errs)
}

// pingError sums up the failed PINGs.
func (r *Redlock) pingError(outer context.Context, errs []error) error {
	var m *multierror.Error
	for _, err := range errs {
		if err != nil {
			m = multierror.Append(m, err)
		}
	}
	if m == nil {
		return nil
	}
	m.ErrorFormat = func(errs []error) string { // one line, as the lock's errors
		parts := make([]string, len(errs))
		for i, err := range errs {
			parts[i] = err.Error()
		}
		return strings.Join(parts, "; ")
	}
	failed := len(m.Errors)
	if len(r.set.Nodes)-failed >= r.Quorum() {
		return fmt.Errorf("redlock: %d of %d nodes did not answer PING; locking works while a majority answers: %w", failed, len(r.set.Nodes), m)
	}
	if err := outer.Err(); err != nil { // not the nodes' fault
		return &unavailableError{msg: fmt.Sprintf("redlock: ctx ended (%v) before a majority of %d answered PING (%d of %d did not): %v", err, r.Quorum(), failed, len(r.set.Nodes), m), nodes: m}
	}
	return &unavailableError{msg: fmt.Sprintf("redlock: %d of %d nodes did not answer PING, no majority of %d: %v", failed, len(r.set.Nodes), r.Quorum(), m), nodes: m}
}

type unavailableError struct {
	msg   string
	nodes *multierror.Error
}

func (e *unavailableError) Error() string        { return e.msg }
func (e *unavailableError) Is(target error) bool { return target == mutex.ErrNodesUnavailable }
func (e *unavailableError) Unwrap() error        { return e.nodes }

// redactURL returns raw with its password replaced by "xxxxx". When the
// URL's user info cannot be told apart (see misplacedUserInfo), everything
// before its last '@' is replaced.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && !misplacedUserInfo(u) {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "xxxxx@" + rest[i+1:]
	}
	if ok {
		return scheme + "://" + rest
	}
	return rest
}

// misplacedUserInfo reports whether a '@' of a URL (nil: url.Parse refused
// it) lies outside its user info: an unescaped '/', '#', '?' or '@' in a
// password moves the rest of it into the host, path, query or fragment,
// where no parser knows it for a password.
func misplacedUserInfo(u *url.URL) bool {
	return u == nil || strings.Contains(u.Host+u.Opaque+u.Path+u.RawQuery+u.Fragment, "@")
}

// invalidURL describes why raw, which url.Parse or redis.ParseURL refused, is
// invalid, without any part of a password: when the user info cannot be told
// apart, a fixed hint replaces the parser's message, which quotes pieces of
// the URL.
func invalidURL(raw string, err error) string {
	if u, _ := url.Parse(raw); strings.Contains(raw, "@") && misplacedUserInfo(u) {
		return "invalid URL (its user info is not printed); percent-encode '/', '#', '?', '@' and ':' in a user name or password"
	}
	return scrub(err.Error(), raw)
}

// scrub removes raw, and its password, from an error message.
func scrub(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, redactURL(raw))
	if u, err := url.Parse(raw); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

func scrubAll(err error, urls []string) error {
	msg := err.Error()
	for _, raw := range urls {
		msg = scrub(msg, raw)
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

// scrubbed is an error whose message had passwords removed; it still matches
// what the original matched.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// WithTLSConfig sets the TLS configuration NewFromURLs uses for rediss://
// nodes instead of Go's default (the system's roots), for a private CA or
// client certificates. The server name is taken from each URL's host unless
// the config sets one. Ignored by New, whose clients come configured.
func WithTLSConfig(c *tls.Config) Option { return func(cfg *config) { cfg.tls = c } }

// Close closes the clients NewFromURLs made; for a set made with New it does
// nothing to the caller's clients. Locks still held are not released: unlock
// them first. Close returns the first error of a client's Close.
func (r *Redlock) Close() error {
	if r == nil {
		return nil
	}
	var first error
	for _, c := range r.owned {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
