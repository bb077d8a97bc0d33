package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartServesEachServer(t *testing.T) {
	servers := Start(t, 3)
	require.Len(t, servers, 3)

	ctx := context.Background()
	seen := map[int]bool{}
	for i, c := range Clients(t, servers) {
		s := servers[i]
		assert.False(t, seen[s.Port()], "port %d used twice", s.Port())
		seen[s.Port()] = true
		assert.Equal(t, fmt.Sprintf("127.0.0.1:%d", s.Port()), s.Addr())
		assert.True(t, s.Running())
		assert.NotZero(t, s.Pid())

		val := fmt.Sprintf("value-%d", i)
		require.NoError(t, c.Set(ctx, "k", val, 0).Err())
		got, err := c.Get(ctx, "k").Result()
		require.NoError(t, err)
		assert.Equal(t, val, got)
		assert.Equal(t, val, s.Do(t, "GET", "k"))
		assert.Nil(t, s.Do(t, "GET", "missing"))
	}
	assert.Equal(t, []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, Addrs(servers))
}

func TestServerConfiguration(t *testing.T) {
	s := StartOne(t, WithArgs("--maxclients", "123"))
	assert.Equal(t, []any{"maxclients", "123"}, configGet(t, s, "maxclients"))
	assert.Equal(t, []any{"bind", "127.0.0.1"}, configGet(t, s, "bind"))
	assert.Equal(t, []any{"save", ""}, configGet(t, s, "save"))
	assert.Equal(t, []any{"appendonly", "no"}, configGet(t, s, "appendonly"))
	assert.Equal(t, []any{"protected-mode", "yes"}, configGet(t, s, "protected-mode"))
	assert.FileExists(t, filepath.Join(s.Dir(), logFile))
}

// configGet returns CONFIG GET name as a flat [name, value] list, whichever
// protocol version go-redis negotiated.
func configGet(t *testing.T, s *Server, name string) []any {
	t.Helper()
	switch v := s.Do(t, "CONFIG", "GET", name).(type) {
	case []any:
		return v
	case map[any]any:
		return []any{name, v[name]}
	default:
		t.Fatalf("CONFIG GET %s: unexpected reply %#v", name, v)
		return nil
	}
}

func TestKillRefusesConnections(t *testing.T) {
	s := StartOne(t)
	s.Kill()

	assert.False(t, s.Running())
	assert.Zero(t, s.Pid())
	_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)

	s.Kill() // idempotent
	assert.False(t, s.Running())
}

func TestPauseResume(t *testing.T) {
	s := StartOne(t)
	c := s.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err()) // connect before pausing

	s.Pause()
	s.Pause() // idempotent
	assert.True(t, s.Running(), "a paused server is running")

	start := time.Now()
	err := c.Ping(ctx).Err()
	require.Error(t, err)
	var netErr net.Error
	require.ErrorAs(t, err, &netErr)
	assert.True(t, netErr.Timeout(), "want a timeout, got %v", err)
	assert.Less(t, time.Since(start), 2*time.Second)

	// The kernel still accepts connections; nothing answers them.
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	_, err = conn.Read(make([]byte, 16))
	require.ErrorAs(t, err, &netErr)
	assert.True(t, netErr.Timeout(), "want a timeout, got %v", err)

	s.Resume()
	s.Resume() // idempotent
	assert.NoError(t, c.Ping(ctx).Err())

	// The connection made while paused is served now.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
	buf := make([]byte, 16)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", string(buf[:n]))
}

func TestRestartStartsEmptyOnSamePort(t *testing.T) {
	s := StartOne(t)
	c := s.Client(t)
	require.NoError(t, c.Set(context.Background(), "k", "v", 0).Err())
	port, pid := s.Port(), s.Pid()

	s.Restart()

	assert.Equal(t, port, s.Port())
	assert.True(t, s.Running())
	assert.NotZero(t, s.Pid())
	assert.NotEqual(t, pid, s.Pid())
	assert.Nil(t, s.Do(t, "GET", "k"))
	assert.ErrorIs(t, c.Get(context.Background(), "k").Err(), redis.Nil,
		"a client made before the restart reconnects")
}

func TestRestartAfterKill(t *testing.T) {
	s := StartOne(t)
	s.Kill()
	s.Restart()
	assert.True(t, s.Running())
	assert.Equal(t, "PONG", s.Do(t, "PING"))
}

func TestRestartWhilePaused(t *testing.T) {
	s := StartOne(t)
	s.Pause()
	s.Restart()
	assert.Equal(t, "PONG", s.Do(t, "PING"))
}

func TestRestartWithAOFKeepsData(t *testing.T) {
	s := StartOne(t, WithAOF())
	assert.Equal(t, []any{"appendfsync", "always"}, configGet(t, s, "appendfsync"))
	s.Do(t, "SET", "k", "v")

	s.Restart()
	assert.Equal(t, "v", s.Do(t, "GET", "k"))

	s.Kill()
	s.Restart()
	assert.Equal(t, "v", s.Do(t, "GET", "k"))

	s.RestartEmpty()
	assert.Nil(t, s.Do(t, "GET", "k"))
}

func TestRestartWithoutAOFIgnoresSnapshot(t *testing.T) {
	s := StartOne(t)
	s.Do(t, "SET", "k", "v")
	s.Do(t, "SAVE") // writes dump.rdb, which Restart must not load
	require.FileExists(t, filepath.Join(s.Dir(), "dump.rdb"))

	s.Restart()
	assert.Nil(t, s.Do(t, "GET", "k"))
}

func TestPassword(t *testing.T) {
	s := StartOne(t, WithPassword("s3cret"))
	ctx := context.Background()

	anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer anon.Close()
	err := anon.Ping(ctx).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOAUTH")

	assert.NoError(t, s.Client(t).Ping(ctx).Err())
	assert.Equal(t, "PONG", s.Do(t, "PING"))

	s.Restart()
	assert.Equal(t, "PONG", s.Do(t, "PING"))
}

func TestDebugCommandEnabled(t *testing.T) {
	s := StartOne(t)
	if major, err := majorVersion(Require(t)); err != nil || major < 7 {
		t.Skipf("redis-server major version %d (%v) has no --enable-debug-command", major, err)
	}
	assert.Equal(t, "OK", s.Do(t, "DEBUG", "SET-ACTIVE-EXPIRE", "1"))
}

func TestServerThatExitsIsNotRunning(t *testing.T) {
	s := StartOne(t)
	c := s.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	_ = c.Shutdown(context.Background()).Err() // the connection drops: an error is expected

	deadline := time.Now().Add(5 * time.Second)
	for s.Running() {
		require.True(t, time.Now().Before(deadline), "server still running after SHUTDOWN")
		time.Sleep(5 * time.Millisecond)
	}
	assert.Zero(t, s.Pid())
	s.Kill() // no-op
	s.Restart()
	assert.Equal(t, "PONG", s.Do(t, "PING"))
}

func TestCleanupEndsServers(t *testing.T) {
	Require(t)
	var addrs []string
	t.Run("start", func(t *testing.T) {
		servers := Start(t, 2)
		servers[1].Pause()
		Clients(t, servers)
		addrs = Addrs(servers)
	})
	require.Len(t, addrs, 2)
	for _, addr := range addrs {
		_, err := net.DialTimeout("tcp", addr, time.Second)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "%s still accepts connections after cleanup", addr)
	}
}

func TestStartMovesOffTakenPort(t *testing.T) {
	bin := Require(t)
	major, err := majorVersion(bin)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port

	s := newServer(t, bin, Config{}, major)
	t.Cleanup(s.cleanup)

	_, err = s.boot(taken)
	require.ErrorIs(t, err, errPortInUse)
	assert.Contains(t, err.Error(), "Address already in use", "the error carries the server's log")

	start := time.Now()
	require.NoError(t, s.start(taken))
	assert.NotEqual(t, taken, s.Port())
	assert.Equal(t, "PONG", s.Do(t, "PING"))
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestConcurrentUse(t *testing.T) {
	s := StartOne(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 5 {
				_ = s.Running()
				_ = s.Pid()
				_ = s.Addr()
				if i%2 == 0 {
					s.Pause()
					s.Resume()
				}
			}
		})
	}
	wg.Go(func() { s.Restart() })
	wg.Wait()
	assert.Equal(t, "PONG", s.Do(t, "PING"))
}

// fakeTB records Skipf and Fatalf and ends the calling goroutine, as
// testing.T does.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runRequire calls Require with a fakeTB on its own goroutine.
func runRequire() (path string, tb *fakeTB) {
	tb = &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path = Require(tb)
	}()
	<-done
	return path, tb
}

func TestRequireMissingServer(t *testing.T) {
	t.Setenv(EnvServer, "/nonexistent")

	t.Setenv(EnvRequire, "")
	_, tb := runRequire()
	assert.True(t, tb.skipped)
	assert.False(t, tb.failed)
	assert.Contains(t, tb.msg, "apt-get install -y redis-server")
	assert.Contains(t, tb.msg, "/nonexistent")

	t.Setenv(EnvRequire, "1")
	_, tb = runRequire()
	assert.True(t, tb.failed)
	assert.False(t, tb.skipped)
	assert.Contains(t, tb.msg, "apt-get install -y redis-server")
}

func TestRequireFromEnv(t *testing.T) {
	bin := Require(t)
	rel, err := filepath.Rel(mustGetwd(t), bin)
	require.NoError(t, err)
	if !strings.HasPrefix(rel, "..") {
		rel = "./" + rel
	}
	t.Setenv(EnvServer, rel)
	got, tb := runRequire()
	require.False(t, tb.skipped || tb.failed, tb.msg)
	assert.Equal(t, bin, got, "a relative %s must be made absolute", EnvServer)
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return wd
}

func TestParseMajorVersion(t *testing.T) {
	for out, want := range map[string]int{
		"Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0\n": 7,
		"Redis server v=6.2.6 sha=00000000:0 malloc=libc bits=64 build=1\n":                          6,
		"Redis server v=10.1.0 sha=1\n": 10,
	} {
		got, err := parseMajorVersion(out)
		require.NoError(t, err, out)
		assert.Equal(t, want, got, out)
	}
	_, err := parseMajorVersion("something else")
	assert.Error(t, err)
}

func TestStartRejectsZeroServers(t *testing.T) {
	tb := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(tb, 0)
	}()
	<-done
	assert.True(t, tb.failed)
}
