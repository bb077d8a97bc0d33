package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/timing"
)

// Client settings NewFromURLs applies when a URL does not set them itself.
const (
	// urlDialTimeout bounds a connection attempt.
	urlDialTimeout = time.Second
	// urlIOTimeout bounds each read and write: twice the largest per-node timeout
	// derived from a TTL, so an abandoned command soon frees its connection.
	urlIOTimeout = time.Second
)

// NewFromURLs builds a node set from one URL per node: redis://[user:password@]host:port[/db]
// (rediss:// for TLS, see WithTLSConfig), or redis+cluster://host:port?addr=host2:port
// for a Redis Cluster. Settings a URL leaves unset are a lock's: 1s to dial,
// per read and per write, one dial attempt, no retries, no Cluster redirects.
//
// Unreachable nodes are never its error. It fails, matching mutex.ErrInvalid,
// only for malformed input, a set that counts one server or Cluster twice, a
// URL of the wrong scheme for its server (redis+cluster:// for a Cluster's
// only) or a Cluster URL reaching two Clusters, found by pinging every node
// and seed once, for at most the per-node timeout (200ms by default) and
// never past ctx's end (a node found later is refused by every lock call). Close ends the pings still out and closes the clients it
// made. Node names hide passwords. See docs/design.md, "Cluster nodes".
func NewFromURLs(ctx context.Context, urls []string, opts ...Option) (*Redlock, error) {
	cfg := configure(opts)
	if len(urls) == 0 {
		return nil, invalid("redlock: no node URLs given")
	}
	if ctx == nil {
		return nil, invalid("redlock: nil context.Context; pass context.Background() or one with a deadline")
	}
	names := make([]string, len(urls))
	for i, raw := range urls {
		names[i] = redactURL(raw)
	}
	same := newSameServer(names)
	clients := make([]redis.UniversalClient, 0, len(urls))
	var seeds []*redis.Client // every seed of the Cluster URLs
	var races []*slotRace     // one per Cluster URL
	closeAll := func() {
		for _, c := range seeds {
			_ = c.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for i, raw := range urls {
		if plain, ok := clusterURL(raw); ok {
			o, err := cfg.clusterOptions(plain)
			if err == nil {
				err = checkHost(plain, true)
			}
			for j := 0; err == nil && j < len(o.Addrs); j++ {
				err = checkAddr("tcp", o.Addrs[j], o.DialTimeout)
			}
			if err != nil {
				closeAll()
				return nil, invalid("redlock: node %d (%s): %s", i, names[i], invalidURL(plain, err))
			}
			same.watchCluster(i, o)
			own := make([]*redis.Client, len(o.Addrs))
			for j, addr := range o.Addrs {
				own[j] = seedClient(o, addr)
			}
			seeds = append(seeds, own...)
			races = append(races, raceSlotMaps(o, own))
			c := redis.NewClusterClient(o)
			c.AddHook(same.hook(i))
			clients = append(clients, c)
			continue
		}
		o, err := redis.ParseURL(raw)
		if err == nil {
			err = checkAddr(o.Network, o.Addr, o.DialTimeout)
		}
		if err == nil && o.Network == "tcp" {
			err = checkHost(raw, false)
		}
		if err == nil && o.DB < 0 {
			err = fmt.Errorf("invalid database %d: it must not be negative", o.DB)
		}
		if err != nil {
			closeAll()
			return nil, invalid("redlock: node %d (%s): %s", i, names[i], invalidURL(raw, err))
		}
		cfg.lockSettings(&o.TLSConfig, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries)
		same.watch(i, o)
		c := redis.NewClient(o)
		c.AddHook(same.hook(i))
		clients = append(clients, c)
	}
	rs, err := New(clients, opts...)
	if err != nil {
		closeAll()
		return nil, scrubAll(err, urls)
	}
	rs.owned, rs.seeds, rs.races = clients, seeds, races
	for i, n := range rs.set.Nodes {
		n.SetAddr(names[i])
	}
	rs.ping(ctx)
	if err := same.firstErr(); err != nil {
		_ = rs.Close()
		return nil, err
	}
	return rs, nil
}

// checkAddr refuses what go-redis's parser takes but every dial would fail
// on: a TCP port that is not 1 to 65535, a negative dial_timeout.
func checkAddr(network, addr string, dial time.Duration) error {
	if dial < 0 {
		return fmt.Errorf("invalid dial_timeout %v: it must not be negative", dial)
	}
	_, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); network == "tcp" && err == nil && (perr != nil || n < 1 || n > 65535) {
		return fmt.Errorf("invalid port %q: a TCP port is 1 to 65535", port)
	}
	return nil
}

// checkHost refuses a TCP URL with no host, which go-redis's parser reads
// as localhost:6379 (a redis://${HOST} whose HOST was unset would lock on
// whatever server listens there), and a database other than 0 in a Cluster
// URL, which go-redis ignores (a Cluster has only database 0).
func checkHost(raw string, cluster bool) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil // go-redis's parser has said what it takes
	case u.Hostname() == "":
		return errors.New("no host: a node URL names its server, as redis://host:port")
	case cluster && strings.Trim(u.Path, "/") != "" && strings.Trim(u.Path, "/") != "0":
		return fmt.Errorf("database %q: a Cluster has only database 0", strings.Trim(u.Path, "/"))
	}
	return nil
}

// ping asks every node, and every seed of a Cluster URL, PING in parallel,
// so that the servers that answer are checked by sameServer, and waits for
// the answers until they are all in, the per-node timeout of a lock of the
// default TTL passes, or ctx ends. A ping still out runs on in r.pings
// (go-redis's reads ignore ctx), until its answer, its client's read
// timeout, or Close, which closes the client. Failures are left for the
// lock calls to report.
func (r *Redlock) ping(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.set.Timeout(timing.DefaultTTL))
	defer cancel()
	n := len(r.owned) + len(r.seeds)
	done := make(chan struct{}, n)
	for i := range n {
		r.pings.Go(func() {
			if i < len(r.owned) {
				_ = r.owned[i].Ping(context.WithoutCancel(ctx)).Err()
			} else {
				_ = r.seeds[i-len(r.owned)].Ping(context.WithoutCancel(ctx)).Err()
			}
			done <- struct{}{}
		})
	}
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// redactURL returns raw with its password replaced by "xxxxx", in its user
// info and in any query option whose key holds "pass" (go-redis refuses such
// an option, and its error quotes the URL). When the user info cannot be
// told apart (see misplacedUserInfo), everything before its last '@' is
// replaced.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && !misplacedUserInfo(u) {
		return redactQuery(u.Redacted())
	}
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = "xxxxx@" + rest[i+1:]
	}
	return redactQuery(scheme + rest)
}

// redactQuery replaces the value of every query option of s whose key holds
// "pass", in any case, by "xxxxx".
func redactQuery(s string) string {
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	options := strings.Split(query, "&")
	for i, o := range options {
		if key, _, ok := strings.Cut(o, "="); ok && strings.Contains(strings.ToLower(key), "pass") {
			options[i] = key + "=xxxxx"
		}
	}
	return base + "?" + strings.Join(options, "&")
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

// Close releases the locks its Mutexes still hold (on every node), closing
// their Lost channels with a LostCause matching mutex.ErrClosed. Every later
// call that returns an error, of the set (Do, Check, Inspect, ForceUnlock) or
// of its locks, and every waiting LockContext call, fails with
// mutex.ErrClosed, sending nothing. The releases, and the commands still on
// their way (an earlier release's to slow nodes, a rollback of a lock call
// under way), get one per-node timeout from Close's start (the largest of
// the held locks', the lock calls' made and the default TTL's, 200ms by
// default); a release still waiting for a node that did not answer it
// (sent again once the node answers) is dropped, its key left to expire on
// that node. Then Close closes the clients NewFromURLs made, not those
// given to New. Close is idempotent and safe for concurrent use;
// it returns the first error of a client's Close.
func (r *Redlock) Close() error {
	if r == nil || r.set == nil {
		return nil
	}
	r.closeOnce.Do(func() {
		r.set.Close()
		for _, c := range r.owned {
			if err := c.Close(); err != nil && r.closeErr == nil {
				r.closeErr = err
			}
		}
		for _, c := range r.seeds {
			_ = c.Close()
		}
		for _, race := range r.races {
			race.close() // its asks, cut short by the clients' Close
		}
		r.pings.Wait() // NewFromURLs's, likewise
	})
	return r.closeErr
}
