// Package demo gives the examples their nodes: embedded Redis nodes by
// default, so each example runs with nothing but Go, or real servers given as
// URLs with -nodes.
package demo

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// RedisLog routes go-redis's own log lines (a failed dial, a pool event)
// to a service's structured log, at Warn, tagged from=go-redis:
//
//	redis.SetLogger(demo.RedisLog{Logger: slog.Default()})
//
// The lock's errors already name each failed node; see docs/operations.md.
type RedisLog struct{ Logger *slog.Logger }

// Printf implements go-redis's logger interface.
func (r RedisLog) Printf(ctx context.Context, format string, v ...any) {
	r.Logger.WarnContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

// NodesFlag registers -nodes on the default flag set: comma-separated node
// URLs (redis://..., rediss://user:pass@host:port/0). Empty means embedded
// nodes.
func NodesFlag() *string {
	return flag.String("nodes", "", "comma-separated Redis node URLs (redis:// or rediss://); empty: 5 embedded nodes")
}

// Nodes returns a node set over the given URLs (comma-separated), or over n
// embedded nodes started in this process when urls is empty, and a function
// that releases everything. Embedded nodes keep the examples runnable with
// only Go; they are not independent machines.
func Nodes(ctx context.Context, urls string, n int, opts ...redlock.Option) (*redlock.Redlock, func(), error) {
	if urls != "" {
		rs, err := redlock.NewFromURLs(ctx, strings.Split(urls, ","), opts...)
		if err != nil { // malformed URLs; nodes that do not answer are no error
			return nil, nil, err
		}
		return rs, func() { _ = rs.Close() }, nil
	}
	var servers []*miniredis.Miniredis
	var clients []redis.UniversalClient
	stop := func() {
		for _, c := range clients {
			_ = c.Close()
		}
		for _, s := range servers {
			s.Close()
		}
	}
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("starting an embedded node: %w", err)
		}
		servers = append(servers, s)
		clients = append(clients, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1}))
	}
	rs, err := redlock.New(clients, opts...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return rs, stop, nil
}

// URLs returns the URLs of the Redis nodes to lock on: urls
// (comma-separated, from -nodes) when given, otherwise those of n embedded
// nodes it starts in this process, and a function that stops them.
//
// The embedded nodes expire keys as time passes, as Redis does (miniredis's
// ClockTTL; by default it expires keys only when a test fast-forwards it).
// This example relies on expiry. They are not independent machines, only a
// way to run the example with nothing but Go.
func URLs(urls string, n int) ([]string, func(), error) {
	if urls != "" {
		return strings.Split(urls, ","), func() {}, nil
	}
	list, _, stop, err := Embedded(n)
	return list, stop, err
}

// Embedded starts n embedded nodes as URLs does and returns their URLs, the
// nodes themselves (an example may stop one, as a node failure), and a
// function that stops them all.
func Embedded(n int) ([]string, []*miniredis.Miniredis, func(), error) {
	var servers []*miniredis.Miniredis
	stop := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	list := make([]string, n)
	for i := range list {
		s := miniredis.NewMiniRedis()
		s.ClockTTL(true)
		if err := s.Start(); err != nil {
			stop()
			return nil, nil, nil, fmt.Errorf("starting an embedded node: %w", err)
		}
		servers = append(servers, s)
		list[i] = "redis://" + s.Addr()
	}
	return list, servers, stop, nil
}

// Open connects to the nodes at urls with connections of its own, as a
// separate process would: each replica or candidate of an example calls it. Close the returned set to
// close them. Nodes that do not answer are no error; locking works while a
// majority does.
func Open(ctx context.Context, urls []string, opts ...redlock.Option) (*redlock.Redlock, error) {
	opts = append([]redlock.Option{redlock.WithNodeTimeout(NodeTimeout)}, opts...)
	return redlock.NewFromURLs(ctx, urls, opts...)
}

// OpenEach calls Open n times, for n replicas or candidates that each have
// connections of their own, and returns the sets with a function that closes
// them all.
func OpenEach(ctx context.Context, urls []string, n int, opts ...redlock.Option) ([]*redlock.Redlock, func(), error) {
	var sets []*redlock.Redlock
	closeAll := func() {
		for _, rs := range sets {
			_ = rs.Close()
		}
	}
	for range n {
		rs, err := Open(ctx, urls, opts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		sets = append(sets, rs)
	}
	return sets, closeAll, nil
}

// NodeTimeout is how long a lock operation waits for any one node. By default
// the library derives it from the TTL (TTL/100, at least 20ms); the short TTL
// that lets this example run in seconds would give 20ms, which a loaded
// machine does not always meet (nor the embedded nodes under the race
// detector: they run each lock script in a Lua interpreter written in Go).
// An acquisition still waits no longer than its TTL allows, and renewals no
// longer than the lock's validity. With TTLs of seconds, as in production,
// the default is right.
const NodeTimeout = time.Second

// The client timeouts redlock.NewFromURLs sets when a URL leaves them unset:
// OpenCrashable builds its clients itself, with the same settings.
const (
	urlDialTimeout = time.Second
	urlIOTimeout   = time.Second
)

// OpenCrashable is Open over clients that crash closes, as a process dying
// with its connections would: the set's locks are neither renewed nor
// released, and stay on the nodes until their TTL runs out (Close would
// release them). closeAll closes the set, then the clients; it may follow
// crash.
func OpenCrashable(urls []string, opts ...redlock.Option) (rs *redlock.Redlock, crash, closeAll func(), err error) {
	var clients []redis.UniversalClient
	var once sync.Once
	crash = func() {
		once.Do(func() {
			for _, c := range clients {
				_ = c.Close()
			}
		})
	}
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		if err != nil {
			crash()
			return nil, nil, nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = urlDialTimeout, urlIOTimeout, urlIOTimeout
		o.MaxRetries, o.DialerRetries = -1, 1
		clients = append(clients, redis.NewClient(o))
	}
	rs, err = redlock.New(clients, append([]redlock.Option{redlock.WithNodeTimeout(NodeTimeout)}, opts...)...)
	if err != nil {
		crash()
		return nil, nil, nil, err
	}
	return rs, crash, func() { _ = rs.Close(); crash() }, nil
}
