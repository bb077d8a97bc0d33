package redlock_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// call is one call of a method of a set or of its locks; method is
// "Type.Method", then "/" and which lock.
type call struct {
	method string
	run    func(ctx context.Context) error
}

// allCalls returns a call of every method that can fail, of rs and of its
// locks: locks held (taken here), and locks never used. ran is set if Do's
// fn runs.
func allCalls(t *testing.T, rs *redlock.Redlock, ran *atomic.Bool) []call {
	ctx := t.Context()
	held := rs.NewMutex("closed:held", mutex.WithTTL(time.Minute))
	multi := rs.NewMultiMutex([]string{"closed:multi:a", "closed:multi:b"}, mutex.WithTTL(time.Minute))
	writer := rs.NewRWMutex("closed:rw:writer", mutex.WithTTL(time.Minute))
	reader := rs.NewRWMutex("closed:rw:reader", mutex.WithTTL(time.Minute))
	sem := rs.NewSemaphore("closed:sem", 3, mutex.WithTTL(time.Minute))
	require.NoError(t, held.LockContext(ctx))
	require.NoError(t, multi.LockContext(ctx))
	require.NoError(t, writer.LockContext(ctx))
	require.NoError(t, reader.RLockContext(ctx))
	permit, err := sem.AcquireContext(ctx)
	require.NoError(t, err)
	handle, err := held.Handle()
	require.NoError(t, err)
	leader, follower := rs.NewElection("closed:election"), rs.NewElection("closed:election")
	require.NoError(t, leader.Campaign(ctx, "leader"))

	calls := []call{
		{"Redlock.Check", func(ctx context.Context) error { _, err := rs.Check(ctx); return err }},
		{"Redlock.Inspect", func(ctx context.Context) error { _, err := rs.Inspect(ctx, "closed:held"); return err }},
		{"Redlock.ForceUnlock", func(ctx context.Context) error { _, err := rs.ForceUnlock(ctx, "closed:forced"); return err }},
		{"Redlock.Do", func(ctx context.Context) error {
			return rs.Do(ctx, "closed:do", func(context.Context) error { ran.Store(true); return nil })
		}},
		{"Semaphore.AcquireContext", func(ctx context.Context) error { _, err := sem.AcquireContext(ctx); return err }},
		{"Semaphore.TryAcquireContext", func(ctx context.Context) error { _, err := sem.TryAcquireContext(ctx); return err }},
		{"Permit.ExtendContext", permit.ExtendContext},
		{"Permit.ReleaseContext", permit.ReleaseContext},
		{"Redlock.ResumeMutex", func(ctx context.Context) error { _, err := rs.ResumeMutex(ctx, handle); return err }},
	}
	for label, e := range map[string]*mutex.Election{"leader": leader, "follower": follower} {
		calls = append(calls,
			call{"Election.Campaign/" + label, func(ctx context.Context) error { return e.Campaign(ctx, "again") }},
			call{"Election.Proclaim/" + label, func(ctx context.Context) error { return e.Proclaim(ctx, "new") }},
			call{"Election.Resign/" + label, e.Resign},
			call{"Election.Leader/" + label, func(ctx context.Context) error { _, err := e.Leader(ctx); return err }})
	}
	for label, m := range map[string]*mutex.Mutex{"held": held, "multi": multi, "new": rs.NewMutex("closed:new")} {
		calls = append(calls,
			call{"Mutex.LockContext/" + label, m.LockContext},
			call{"Mutex.TryLockContext/" + label, m.TryLockContext},
			call{"Mutex.ExtendContext/" + label, m.ExtendContext},
			call{"Mutex.UnlockContext/" + label, m.UnlockContext},
			call{"Mutex.Handle/" + label, func(context.Context) error { _, err := m.Handle(); return err }})
	}
	for label, rw := range map[string]*mutex.RWMutex{"writer": writer, "reader": reader, "new": rs.NewRWMutex("closed:rw:new")} {
		calls = append(calls,
			call{"RWMutex.RLockContext/" + label, rw.RLockContext},
			call{"RWMutex.TryRLockContext/" + label, rw.TryRLockContext},
			call{"RWMutex.LockContext/" + label, rw.LockContext},
			call{"RWMutex.TryLockContext/" + label, rw.TryLockContext},
			call{"RWMutex.ExtendContext/" + label, rw.ExtendContext},
			call{"RWMutex.RUnlockContext/" + label, rw.RUnlockContext},
			call{"RWMutex.UnlockContext/" + label, rw.UnlockContext})
	}
	return calls
}

// Every exported method that returns an error, of the set and of its locks,
// is in allCalls: a method added later cannot escape these tests. Close is
// tested on its own; LostCause reports a loss, it does not fail.
func requireEveryMethod(t *testing.T, calls []call) {
	listed := map[string]bool{}
	for _, c := range calls {
		method, _, _ := strings.Cut(c.method, "/")
		listed[method] = true
	}
	errType := reflect.TypeFor[error]()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[*redlock.Redlock](), reflect.TypeFor[*mutex.Mutex](), reflect.TypeFor[*mutex.RWMutex](),
		reflect.TypeFor[*mutex.Semaphore](), reflect.TypeFor[*mutex.Permit](), reflect.TypeFor[*mutex.Election](),
	} {
		for m := range typ.Methods() {
			if m.Name == "Close" || m.Name == "LostCause" || m.Type.NumOut() == 0 || m.Type.Out(m.Type.NumOut()-1) != errType {
				continue
			}
			assert.True(t, listed[typ.Elem().Name()+"."+m.Name], "%s.%s is not in allCalls", typ.Elem().Name(), m.Name)
		}
	}
}

// commandCounts returns a function that reads how many commands each server
// has processed, over a connection of its own: each read adds one (its INFO).
func commandCounts(t *testing.T, servers []*redistest.Server) func() []int64 {
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.PoolSize, o.MaxRetries = 1, -1 })
	}
	read := func() []int64 {
		counts := make([]int64, len(clients))
		for i, c := range clients {
			info, err := c.Info(t.Context(), "stats").Result()
			require.NoError(t, err)
			for line := range strings.Lines(info) {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
					counts[i], err = strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
				}
			}
			require.NotZero(t, counts[i], "no total_commands_processed in INFO stats")
		}
		return counts
	}
	read() // connects: the handshake's commands are counted before the first reading
	return read
}

// openers make a set over servers as New and as NewFromURLs do: the clients
// given to New stay open after Close, so Close alone must keep calls from
// sending.
func openers(servers []*redistest.Server) map[string]func(t *testing.T) *redlock.Redlock {
	return map[string]func(t *testing.T) *redlock.Redlock{
		"New": func(t *testing.T) *redlock.Redlock {
			rs, err := redlock.New(redistest.Clients(t, servers))
			require.NoError(t, err)
			return rs
		},
		"NewFromURLs": func(t *testing.T) *redlock.Redlock {
			rs, err := redlock.NewFromURLs(t.Context(), urlsOf(servers, ""))
			require.NoError(t, err)
			return rs
		},
	}
}

// After Close, every method of the set and of its locks that can fail
// returns an error matching ErrClosed, and no command reaches any node.
func TestEveryCallAfterCloseFailsAndSendsNothing(t *testing.T) {
	servers := redistest.Start(t, 3)
	counts := commandCounts(t, servers)
	for name, open := range openers(servers) {
		t.Run(name, func(t *testing.T) {
			rs := open(t)
			var ran atomic.Bool
			calls := allCalls(t, rs, &ran)
			requireEveryMethod(t, calls)

			before := counts()
			_, err := rs.Inspect(t.Context(), "closed:held")
			require.NoError(t, err)
			for i, n := range counts() {
				require.Greater(t, n-before[i], int64(1), "the count sees the set's commands on %s", servers[i].Addr())
			}

			require.NoError(t, rs.Close())
			for _, c := range calls {
				t.Run(c.method, func(t *testing.T) {
					before := counts()
					err := c.run(t.Context())
					assert.ErrorIs(t, err, mutex.ErrClosed)
					assert.ErrorContains(t, err, "closed")
					for i, n := range counts() {
						assert.Equal(t, int64(1), n-before[i], "commands reached %s besides the count's INFO", servers[i].Addr())
					}
				})
			}
			assert.False(t, ran.Load(), "Do ran fn after Close")
		})
	}
}

// A call racing Close neither panics nor hangs: it succeeds or fails, and
// no goroutine it started outlives it.
func TestCallsRacingCloseReturn(t *testing.T) {
	servers := redistest.Start(t, 3)
	for name, open := range openers(servers) {
		t.Run(name, func(t *testing.T) {
			rs := open(t)
			var ran atomic.Bool
			calls := allCalls(t, rs, &ran)
			baseline := goleak.IgnoreCurrent()
			start := make(chan struct{})
			var wg sync.WaitGroup
			for _, c := range calls {
				wg.Go(func() {
					<-start
					_ = c.run(t.Context()) // nil or an error: the call ran before or after Close
				})
			}
			close(start)
			require.NoError(t, rs.Close())
			returned := make(chan struct{})
			go func() { wg.Wait(); close(returned) }()
			select {
			case <-returned:
			case <-time.After(30 * time.Second):
				t.Fatal("a call racing Close did not return")
			}
			rs.Settle()
			goleak.VerifyNone(t, baseline)
			for _, c := range calls {
				require.ErrorIs(t, c.run(t.Context()), mutex.ErrClosed, c.method)
			}
		})
	}
}
