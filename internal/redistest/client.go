package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// doTimeout bounds one Server.Do call: dial, write and read.
const doTimeout = 2 * time.Second

// Client returns a new go-redis client for the server, authenticating with
// the server's password if it has one. Every other option keeps go-redis's
// default (in particular ContextTimeoutEnabled stays false) unless one of opts
// changes it. After a restart the client reconnects, since the address does
// not change; commands sent while the server is down fail. The client is
// closed at t's cleanup, or at the cleanup of the test that started the
// server if that comes first.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr(), Password: s.cfg.Password}
	for _, opt := range opts {
		opt(o)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		t.Fatalf("redistest: Client %s: the test that started the server has ended", o.Addr)
	}
	c := redis.NewClient(o)
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	t.Cleanup(func() {
		if err := closeClient(c); err != nil {
			t.Errorf("redistest: closing client of %s: %v", o.Addr, err)
		}
	})
	return c
}

// Clients returns one [Server.Client] with default options per server, in
// order, as the interface the lock library takes.
func Clients(t testing.TB, servers []*Server) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t)
	}
	return clients
}

// Do runs one command on the server over a new connection, which it closes
// before returning, and returns the reply: nil for a nil reply (redis.Nil),
// otherwise the value go-redis's Cmd.Result gives. The call, dial included,
// is bounded by 2s. Any other error fails the test. Do is meant for
// assertions, e.g. s.Do(t, "GET", "key").
func (s *Server) Do(t testing.TB, args ...any) any {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		Password:              s.cfg.Password,
		DialTimeout:           doTimeout,
		DialerRetries:         1,
		ReadTimeout:           doTimeout,
		WriteTimeout:          doTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("redistest: Do %v on %s: %v", args, c.Options().Addr, err)
	}
	return v
}

// closeClient closes c; closing a closed client is not an error.
func closeClient(c *redis.Client) error {
	if err := c.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return err
	}
	return nil
}

// SlowReplies is a go-redis hook that delays every reply by its duration
// after it arrived: a slow link, for a client's AddHook.
type SlowReplies time.Duration

func (d SlowReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d SlowReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		time.Sleep(time.Duration(d))
		return err
	}
}

func (d SlowReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		time.Sleep(time.Duration(d))
		return err
	}
}
