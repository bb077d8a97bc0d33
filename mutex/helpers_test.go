package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// go-redis's pool probes a node that refused enough dials once a second
// until its client is closed, and ends only after its current sleep
// (TestClusterFailoverUnderContention kills a shard primary).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// backend is a set of n nodes for a test: the clients the lock uses (go-redis
// defaults: 5s read timeout, ContextTimeoutEnabled off), separate clients for
// the test's own assertions, and the faults the backend can inject.
type backend struct {
	name    string
	clients []redis.UniversalClient
	admin   []redis.UniversalClient
	addrs   []string
	kill    func(i int)
	scripts func(i int) int64      // lock scripts node i has run so far (miniredis: all commands)
	real    []*redistest.Server    // nil for miniredis
	mini    []*miniredis.Miniredis // nil for redis-server
}

// onBoth runs fn as two subtests: on n embedded miniredis nodes and on n real
// redis-server processes (skipped, or failed under REDLOCK_REQUIRE_REDIS=1,
// when redis-server is missing).
func onBoth(t *testing.T, n int, fn func(t *testing.T, b *backend)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, miniBackend(t, n)) })
	t.Run("redis-server", func(t *testing.T) { fn(t, realBackend(t, n)) })
}

func miniBackend(t *testing.T, n int) *backend {
	t.Helper()
	redistest.SkipMiniredisInFIPSOnly(t)
	b := &backend{name: "miniredis"}
	for range n {
		s := miniredis.RunT(t)
		b.mini = append(b.mini, s)
		b.addrs = append(b.addrs, s.Addr())
		b.clients = append(b.clients, closing(t, redis.NewClient(&redis.Options{Addr: s.Addr()})))
		b.admin = append(b.admin, closing(t, adminClient(s.Addr())))
	}
	b.kill = func(i int) { b.mini[i].Close() }
	b.scripts = func(i int) int64 { return int64(b.mini[i].CommandCount()) }
	return b
}

func realBackend(t *testing.T, n int, opts ...redistest.Option) *backend {
	t.Helper()
	servers := redistest.Start(t, n, opts...)
	b := &backend{name: "redis-server", real: servers, addrs: redistest.Addrs(servers)}
	b.clients = redistest.Clients(t, servers)
	for _, s := range servers {
		b.admin = append(b.admin, closing(t, adminClient(s.Addr())))
	}
	b.kill = func(i int) { servers[i].Kill() }
	b.scripts = func(i int) int64 {
		info := servers[i].Do(t, "INFO", "commandstats").(string)
		return cmdCalls(info, "evalsha") + cmdCalls(info, "eval")
	}
	return b
}

func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
}

func closing(t testing.TB, c *redis.Client) *redis.Client {
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// cmdCalls reads "cmdstat_<name>:calls=N,..." from INFO commandstats.
func cmdCalls(info, name string) int64 {
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		return v
	}
	return 0
}

// set returns a node set over b's clients. Unless opts say otherwise, the
// per-node timeout is a generous second: tests that are not about timeouts
// must not fail because a loaded machine answered slowly.
func (b *backend) set(t testing.TB, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	return newSet(t, b.clients, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
}

func newSet(t testing.TB, clients []redis.UniversalClient, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	rs, err := redlock.New(clients, opts...)
	require.NoError(t, err)
	// A release that too few nodes confirmed (an ASK or TRYAGAIN during a
	// slot move) keeps its acquisition watched until its validity ends;
	// Close ends that, so goleak sees no renewer left.
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

// get reads key on node i; "" when missing.
func (b *backend) get(t testing.TB, i int, key string) string {
	t.Helper()
	v, err := b.admin[i].Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// pttl returns key's remaining TTL on node i.
func (b *backend) pttl(t testing.TB, i int, key string) time.Duration {
	t.Helper()
	d, err := b.admin[i].PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	return d
}

// holders counts the nodes, among those listed (all when none), on which key
// holds value.
func (b *backend) holders(t testing.TB, key, value string, nodes ...int) int {
	t.Helper()
	require.NotEmpty(t, value, "holders needs a token")
	n := 0
	for _, i := range b.pick(nodes) {
		if b.get(t, i, key) == value {
			n++
		}
	}
	return n
}

// present counts the nodes, among those listed (all when none), on which key
// exists.
func (b *backend) present(t testing.TB, key string, nodes ...int) int {
	t.Helper()
	n := 0
	for _, i := range b.pick(nodes) {
		if b.get(t, i, key) != "" {
			n++
		}
	}
	return n
}

func (b *backend) pick(nodes []int) []int {
	if len(nodes) > 0 {
		return nodes
	}
	all := make([]int, len(b.admin))
	for i := range all {
		all[i] = i
	}
	return all
}

// reaching returns clients for b's nodes of which only those listed are
// reachable: the others are closed ports (connection refused), as for a
// client cut off from them.
func (b *backend) reaching(t testing.TB, nodes ...int) []redis.UniversalClient {
	t.Helper()
	cs := make([]redis.UniversalClient, len(b.addrs))
	for i := range cs {
		addr := fmt.Sprintf("127.0.0.1:%d", 1+i)
		if slices.Contains(nodes, i) {
			addr = b.addrs[i]
		}
		cs[i] = closing(t, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond}))
	}
	return cs
}

// del deletes key on every node, as its expiry would.
func (b *backend) del(t testing.TB, key string) {
	t.Helper()
	for _, c := range b.admin {
		require.NoError(t, c.Del(context.Background(), key).Err())
	}
}

// blackhole is a TCP server that accepts connections and never answers, like
// a node behind a dropped route. Closing it (at cleanup) ends every pending
// read of the clients connected to it.
type blackhole struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func newBlackhole(t testing.TB) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &blackhole{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) addr() string { return b.ln.Addr().String() }

func (b *blackhole) close() {
	_ = b.ln.Close()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

// within fails the test unless fn returns within bound. Bounds here are far
// above the expected time and far below the client timeouts they guard
// against (go-redis waits 5s for a reply by default), so a busy machine does
// not make them flaky.
func within(t testing.TB, bound time.Duration, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	took := time.Since(start)
	require.Less(t, took, bound, "call took %v, bound %v", took, bound)
}

// advanceUntil advances fake by an hour each time the code under test waits
// on it, until done delivers, and returns what done delivered.
func advanceUntil(t testing.TB, fake *clock.Fake, done <-chan error) error {
	t.Helper()
	for {
		ctx, cancel := context.WithCancel(t.Context())
		blocked := make(chan error, 1)
		go func() { blocked <- fake.BlockUntil(ctx, 1) }()
		select {
		case err := <-done:
			cancel()
			<-blocked
			return err
		case err := <-blocked:
			cancel()
			require.NoError(t, err)
			fake.Advance(time.Hour)
		}
	}
}

// backoffClock reads the time of a fake clock but runs short timers (per-node
// deadlines, anything under 10s) on real time, so the test controls only the
// long sleeps: the backoff between attempts. Attempts themselves take no fake
// time.
type backoffClock struct {
	*clock.Fake
}

func (c backoffClock) NewTimer(d time.Duration) clock.Timer {
	if d < 10*time.Second {
		return clock.Real().NewTimer(d)
	}
	return c.Fake.NewTimer(d)
}

// requireWoken waits for a waiting LockContext's result, which must be nil,
// at most 5s: less than the 10s to 20s fallback look of the waiters of the
// tests that use it, so only a message can have woken it in time.
func requireWoken(t *testing.T, got <-chan error, msg string) {
	t.Helper()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}
