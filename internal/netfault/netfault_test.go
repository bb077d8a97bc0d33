package netfault_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/netfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// opTimeout bounds every dial, read, write and command in these tests.
const opTimeout = 2 * time.Second

// clientVia returns a client for s that dials addr, a proxy in front of s,
// instead of s itself. It keeps one connection, does not retry, and bounds
// every step by opTimeout unless opts say otherwise. It is closed at t's
// cleanup.
func clientVia(t *testing.T, s *redistest.Server, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	base := func(o *redis.Options) {
		o.Addr = addr
		o.DialTimeout = opTimeout
		o.DialerRetries = 1
		o.ReadTimeout = opTimeout
		o.WriteTimeout = opTimeout
		o.MaxRetries = -1
		o.PoolSize = 1
	}
	return s.Client(t, append([]func(*redis.Options){base}, opts...)...)
}

// contextTimeouts makes the client end a command's reads and writes at the
// deadline of the command's context, if that comes before opTimeout.
func contextTimeouts(o *redis.Options) { o.ContextTimeoutEnabled = true }

// retryOnce lets the client retry a command once, on a new connection, after
// errors such as io.EOF. A connection the proxy has closed can look healthy
// to go-redis for a moment, until the kernel has handled the FIN; clients
// that must work at once after Heal use this.
func retryOnce(o *redis.Options) { o.MaxRetries = 1 }

// ping sends PING through c, bounded by opTimeout.
func ping(t *testing.T, c *redis.Client) error {
	t.Helper()
	return pingWithin(t, c, opTimeout)
}

// pingWithin sends PING through c with a context that ends after d.
func pingWithin(t *testing.T, c *redis.Client, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return c.Ping(ctx).Err()
}

// set sends SET key value through c, with a context that ends after d.
func set(t *testing.T, c *redis.Client, d time.Duration, key, value string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return c.Set(ctx, key, value, 0).Err()
}

// requireTimeout fails the test unless err is a network timeout.
func requireTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
}

// requireClosedByPeer fails the test unless err says the peer closed or
// reset the connection.
func requireClosedByPeer(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
		"want io.EOF or ECONNRESET, got %v", err)
}

func TestProxyForwards(t *testing.T) {
	s := redistest.StartOne(t)
	p := netfault.New(t, s.Addr())
	host, _, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, s.Addr(), p.Addr())
	assert.Equal(t, s.Addr(), p.Upstream())

	c := clientVia(t, s, p.Addr())
	require.NoError(t, ping(t, c))
	require.NoError(t, set(t, c, opTimeout, "k", "v"))
	got, err := c.Get(t.Context(), "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	assert.Equal(t, "v", s.Do(t, "GET", "k"), "the SET went through to the server")
}

func TestLatencyDelaysReplies(t *testing.T) {
	s := redistest.StartOne(t)
	p := netfault.New(t, s.Addr())
	c := clientVia(t, s, p.Addr())
	require.NoError(t, ping(t, c)) // the connection exists before the latency

	for _, tc := range []struct {
		latency, jitter, atLeast time.Duration
	}{
		{latency: 50 * time.Millisecond, atLeast: 45 * time.Millisecond},
		{latency: 80 * time.Millisecond, jitter: 20 * time.Millisecond, atLeast: 55 * time.Millisecond},
	} {
		p.Latency(tc.latency, tc.jitter)
		start := time.Now()
		require.NoError(t, ping(t, c))
		// Only a lower bound: a busy machine can make anything slower.
		assert.GreaterOrEqual(t, time.Since(start), tc.atLeast, "Latency(%v, %v)", tc.latency, tc.jitter)
	}

	p.Latency(0, 0)
	require.NoError(t, ping(t, c))
	p.Latency(time.Second, 0)
	p.Heal()
	require.NoError(t, ping(t, c), "the client works on after Heal, on a new connection")
}

// fakeTB records Fatalf instead of failing the test. Fatalf ends the calling
// goroutine, as testing.T's does, so calls that may fail run on their own
// goroutine.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestLatencyRejectsInvalidDurations(t *testing.T) {
	// The proxy dials its upstream only when a client connects, so no server
	// is needed here.
	tb := &fakeTB{TB: t}
	p := netfault.New(tb, "127.0.0.1:1")
	for _, tc := range []struct{ latency, jitter time.Duration }{
		{-time.Millisecond, 0},
		{10 * time.Millisecond, -time.Millisecond},
		{10 * time.Millisecond, 20 * time.Millisecond},
		{1500 * time.Microsecond, 0},
		{10 * time.Millisecond, 500 * time.Microsecond},
	} {
		tb.failed = false
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Latency(tc.latency, tc.jitter)
		}()
		<-done
		assert.True(t, tb.failed, "Latency(%v, %v) was accepted", tc.latency, tc.jitter)
		assert.Contains(t, tb.msg, "whole milliseconds")
	}
}

func TestBlackholeTimesOutUntilHeal(t *testing.T) {
	s := redistest.StartOne(t)
	p := netfault.New(t, s.Addr())
	// Blackholed commands get 200ms; the others get opTimeout, so that a busy
	// machine cannot make them time out too.
	const wait = 200 * time.Millisecond
	open := clientVia(t, s, p.Addr(), contextTimeouts)
	require.NoError(t, ping(t, open))

	p.Blackhole()
	p.Blackhole() // a second call changes nothing
	requireTimeout(t, set(t, open, wait, "k", "v"))
	fresh := clientVia(t, s, p.Addr(), contextTimeouts)
	requireTimeout(t, pingWithin(t, fresh, wait))
	assert.Nil(t, s.Do(t, "GET", "k"), "a blackholed command reached the server")

	addr := p.Addr()
	p.Heal()
	assert.Equal(t, addr, p.Addr())
	// go-redis dropped the connections that timed out and dials new ones.
	require.NoError(t, ping(t, open))
	require.NoError(t, ping(t, fresh))
}

func TestResetPeerClosesConnectionsUntilHeal(t *testing.T) {
	s := redistest.StartOne(t)
	p := netfault.New(t, s.Addr())
	open := clientVia(t, s, p.Addr())
	require.NoError(t, ping(t, open))

	p.ResetPeer()
	p.ResetPeer() // a second call changes nothing
	requireClosedByPeer(t, set(t, open, opTimeout, "k", "v"))
	fresh := clientVia(t, s, p.Addr())
	requireClosedByPeer(t, ping(t, fresh))
	assert.Nil(t, s.Do(t, "GET", "k"), "a command reached the server")

	p.Heal()
	require.NoError(t, ping(t, open))
	require.NoError(t, ping(t, fresh))
}

func TestCutRefusesConnectionsUntilHeal(t *testing.T) {
	s := redistest.StartOne(t)
	p := netfault.New(t, s.Addr())
	c := clientVia(t, s, p.Addr(), retryOnce)
	require.NoError(t, ping(t, c))
	open := dialRaw(t, p.Addr())
	addr := p.Addr()

	p.Cut()
	p.Cut() // a second call changes nothing
	// Checked with plain dials: a refused dial would trip go-redis's dial
	// breaker, and the client would go on failing for a while after Heal.
	_, err := net.DialTimeout("tcp", addr, opTimeout)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = open.line()
	requireClosedByPeer(t, err)

	p.Heal()
	p.Heal() // a second call changes nothing
	assert.Equal(t, addr, p.Addr())
	// go-redis drops its closed connection, at the latest when the PING
	// fails on it (see retryOnce), and dials a new one.
	require.NoError(t, ping(t, c))
	require.NoError(t, set(t, c, opTimeout, "k", "v"))
	assert.Equal(t, "v", s.Do(t, "GET", "k"))
}

func TestMeshPartitionsSomePairs(t *testing.T) {
	servers := redistest.Start(t, 2)
	m := netfault.NewMesh(t, 2, redistest.Addrs(servers))

	// clients[c][n] is client c's connection to node n.
	clients := make([][]*redis.Client, 2)
	for c := range clients {
		addrs := m.Addrs(c)
		require.Len(t, addrs, 2)
		for n, s := range servers {
			assert.Equal(t, m.Proxy(c, n).Addr(), addrs[n])
			assert.Equal(t, s.Addr(), m.Proxy(c, n).Upstream())
			clients[c] = append(clients[c], clientVia(t, s, addrs[n], retryOnce))
			require.NoError(t, ping(t, clients[c][n]))
		}
	}
	assert.NotEqual(t, m.Addrs(0), m.Addrs(1), "each client has its own proxies")

	m.Partition([]int{0}, []int{1})
	// A plain dial, for the reason given in TestCutRefusesConnectionsUntilHeal.
	_, err := net.DialTimeout("tcp", m.Addrs(0)[1], opTimeout)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "client 0 reaches node 1")
	require.NoError(t, ping(t, clients[0][0]), "client 0 to node 0")
	require.NoError(t, ping(t, clients[1][0]), "client 1 to node 0")
	require.NoError(t, ping(t, clients[1][1]), "client 1 to node 1")

	m.HealAll()
	for c := range clients {
		for n := range servers {
			require.NoError(t, ping(t, clients[c][n]), "client %d to node %d", c, n)
		}
	}
}

// bigValue is large enough that its GET reply crosses the proxy as several
// chunks.
var bigValue = strings.Repeat("x", 256<<10)

// rawConn is a plain TCP connection to a proxy, for tests that leave data in
// flight.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, opTimeout)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(opTimeout)))
	return &rawConn{Conn: conn, r: bufio.NewReader(conn)}
}

// send writes a command in the inline protocol.
func (c *rawConn) send(t *testing.T, cmd string) {
	t.Helper()
	_, err := io.WriteString(c, cmd+"\r\n")
	require.NoError(t, err)
}

// line reads one reply line, without its CRLF.
func (c *rawConn) line() (string, error) {
	s, err := c.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

// toxiproxyGoroutines returns the stacks of the goroutines running toxiproxy
// code right now, without waiting for any to end.
func toxiproxyGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/Shopify/toxiproxy/") {
			found = append(found, g)
		}
	}
	return found
}

// hold is how long these scenarios wait for a reply to reach the latency
// toxic. Nothing signals that; if the machine is too slow for it, the
// scenario passes while checking less.
const hold = 100 * time.Millisecond

func TestCleanupEndsEveryGoroutine(t *testing.T) {
	s := redistest.StartOne(t)
	s.Do(t, "SET", "big", bigValue)

	for _, tc := range []struct {
		name string
		run  func(t *testing.T, p *netfault.Proxy)
	}{
		{"idle connection", func(t *testing.T, p *netfault.Proxy) {
			c := dialRaw(t, p.Addr())
			c.send(t, "PING")
			got, err := c.line()
			require.NoError(t, err)
			assert.Equal(t, "+PONG", got)
		}},
		{"latency holding a reply in several chunks", func(t *testing.T, p *netfault.Proxy) {
			p.Latency(time.Minute, 0)
			dialRaw(t, p.Addr()).send(t, "GET big")
			time.Sleep(hold)
		}},
		{"latency holding replies when cut, then healed", func(t *testing.T, p *netfault.Proxy) {
			p.Latency(time.Minute, 0)
			c := dialRaw(t, p.Addr())
			c.send(t, "GET big")
			time.Sleep(hold)
			p.Cut()
			_, err := c.line()
			requireClosedByPeer(t, err)
			p.Heal()
			c = dialRaw(t, p.Addr())
			c.send(t, "PING")
			got, err := c.line()
			require.NoError(t, err)
			assert.Equal(t, "+PONG", got, "Heal removed the latency")
		}},
		{"blackhole with data in flight, then healed", func(t *testing.T, p *netfault.Proxy) {
			c := dialRaw(t, p.Addr())
			p.Blackhole()
			c.send(t, "GET big")
			c.send(t, "PING")
			p.Heal()
			_, err := c.line()
			requireClosedByPeer(t, err)
		}},
		{"blackhole at cleanup", func(t *testing.T, p *netfault.Proxy) {
			c := dialRaw(t, p.Addr())
			p.Blackhole()
			c.send(t, "PING")
		}},
		{"reset peer", func(t *testing.T, p *netfault.Proxy) {
			p.ResetPeer()
			c := dialRaw(t, p.Addr())
			c.send(t, "PING")
			_, err := c.line()
			requireClosedByPeer(t, err)
		}},
		{"latency then blackhole", func(t *testing.T, p *netfault.Proxy) {
			p.Latency(time.Minute, 0)
			dialRaw(t, p.Addr()).send(t, "GET big")
			time.Sleep(hold)
			p.Blackhole()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, netfault.New(t, s.Addr()))
		})
		// The subtest's cleanup has run: nothing of toxiproxy may be left,
		// not even for a moment.
		assert.Empty(t, toxiproxyGoroutines(), tc.name)
	}
}

func TestLatencyIsNotFlushedByLaterFaults(t *testing.T) {
	s := redistest.StartOne(t)
	p := netfault.New(t, s.Addr())
	c := dialRaw(t, p.Addr())
	p.Latency(time.Minute, 0)
	c.send(t, "PING")
	time.Sleep(hold)
	p.Blackhole()
	// Without the pass-through toxic after the latency, adding the blackhole
	// would have released the PONG at once.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err := c.line()
	requireTimeout(t, err)
}
