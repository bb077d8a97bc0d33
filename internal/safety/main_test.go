package safety_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/netfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestMain checks that no goroutine is left behind, except the toxic
// goroutines toxiproxy v2.5.0 can leave blocked in the test harness's proxies
// (see internal/netfault).
func TestMain(m *testing.M) {
	var ignore []goleak.Option
	for _, f := range netfault.IgnoreStuckToxics {
		ignore = append(ignore, goleak.IgnoreAnyFunction(f))
	}
	goleak.VerifyTestMain(m, ignore...)
}

// generousNodeTimeout is the per-node timeout of every set in this package unless a
// test says otherwise: generous, so a loaded machine does not turn a slow
// answer into a failure the test did not ask for.
const generousNodeTimeout = time.Second

// backgroundSettle bounds the wait for work the library finishes in the
// background (the releases UnlockContext leaves to complete after a majority
// confirmed), which an external test package cannot wait for otherwise.
const backgroundSettle = 5 * time.Second

// failFastClient returns a go-redis client for addr that fails at once instead of
// retrying: no command retries and a single dial attempt (a default client
// dials 5 times with pauses). It is closed at t's cleanup.
//
// Its PoolSize is far above the number of commands a test sends: once a pool
// has seen PoolSize failed dials in a row, go-redis starts a redial loop that
// sleeps a second between probes and outlives Close by up to that second,
// which the goroutine-leak check in TestMain would report.
func failFastClient(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, PoolSize: 1000}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// adminClientsFor returns one failFastClient per server, for the test's own reads,
// separate from the clients the lock uses.
func adminClientsFor(t testing.TB, servers []*redistest.Server) []*redis.Client {
	t.Helper()
	admins := make([]*redis.Client, len(servers))
	for i, s := range servers {
		admins[i] = failFastClient(t, s.Addr(), func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = time.Second, time.Second })
	}
	return admins
}

// lockSet returns a node set over clients with the package's node timeout in
// front of opts.
func lockSet(t testing.TB, clients []redis.UniversalClient, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	rs, err := redlock.New(clients, append([]redlock.Option{redlock.WithNodeTimeout(generousNodeTimeout)}, opts...)...)
	require.NoError(t, err)
	return rs
}

// readKey reads key on the node behind admin; "" when the key is missing.
func readKey(t testing.TB, admin *redis.Client, key string) string {
	t.Helper()
	v, err := admin.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// tokenHolders counts the nodes on which key holds value.
func tokenHolders(t testing.TB, admins []*redis.Client, key, value string) int {
	t.Helper()
	require.NotEmpty(t, value, "holders needs a token")
	n := 0
	for _, a := range admins {
		if readKey(t, a, key) == value {
			n++
		}
	}
	return n
}

// keyNodes lists the nodes (by address) on which key exists. It does not fail
// the test, so it can be polled by pollUntil: a node that cannot be
// read is listed with the error.
func keyNodes(admins []*redis.Client, key string) []string {
	var on []string
	for _, a := range admins {
		n, err := a.Exists(context.Background(), key).Result()
		switch {
		case err != nil:
			on = append(on, a.Options().Addr+" ("+err.Error()+")")
		case n > 0:
			on = append(on, a.Options().Addr)
		}
	}
	return on
}

// requireGone waits, at most backgroundSettle, until key exists on none of the
// nodes. Polling is the only way: the releases that UnlockContext leaves in
// the background signal nothing an external package can wait on.
func requireGone(t testing.TB, admins []*redis.Client, key string) {
	t.Helper()
	var left []string
	ok := pollUntil(func() bool {
		left = keyNodes(admins, key)
		return len(left) == 0
	})
	require.True(t, ok, "key %q left on %v", key, left)
}

// requireEmpty waits, at most backgroundSettle, until every node has no key at
// all (DBSIZE 0).
func requireEmpty(t testing.TB, admins []*redis.Client) {
	t.Helper()
	var sizes []string
	ok := pollUntil(func() bool {
		sizes = sizes[:0]
		empty := true
		for _, a := range admins {
			keys, err := lockKeys(a)
			if err != nil || len(keys) != 0 {
				empty = false
			}
			sizes = append(sizes, fmt.Sprintf("%s: %q %v", a.Options().Addr, keys, err))
		}
		return empty
	})
	require.True(t, ok, "keys left behind, per node: %v", sizes)
}

// lockKeys returns the keys on a node, leaving out the tombstones of
// releases ("...:quorumlock:rel:TOKEN"): bookkeeping of the library's that expires
// on its own within seconds (see docs/design.md#unlock).
func lockKeys(a *redis.Client) ([]string, error) {
	ctx := context.Background()
	all, err := a.Keys(ctx, "*").Result()
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, k := range all {
		if strings.Contains(k, ":quorumlock:rel:") && a.PTTL(ctx, k).Val() > 0 {
			continue
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// pollUntil polls cond every 2ms until it holds, at most
// backgroundSettle, and reports whether it did. cond runs on the calling
// goroutine, so it may read variables the caller reads afterwards.
func pollUntil(cond func() bool) bool {
	deadline := time.Now().Add(backgroundSettle)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// scriptCallsPerNode returns, per server, how many EVALSHA and EVAL commands it has
// run (INFO commandstats): every lock command is one of them, so an
// unchanged count means nothing was sent.
func scriptCallsPerNode(t testing.TB, servers []*redistest.Server) []int64 {
	t.Helper()
	calls := make([]int64, len(servers))
	for i, s := range servers {
		info, ok := s.Do(t, "INFO", "commandstats").(string)
		require.True(t, ok, "INFO commandstats is a string")
		calls[i] = cmdstatCalls(info, "evalsha") + cmdstatCalls(info, "eval") + cmdstatCalls(info, "evalsha_ro") + cmdstatCalls(info, "eval_ro")
	}
	return calls
}

// awaitPairs polls until, on every node, the script calls since before come
// in pairs (an acquire and the release queued behind it; a command withdrawn
// before it was sent counts for nothing), on at least minNodes nodes.
func awaitPairs(t testing.TB, servers []*redistest.Server, before []int64, minNodes int) {
	t.Helper()
	var now []int64
	ok := pollUntil(func() bool {
		now = scriptCallsPerNode(t, servers)
		reached := 0
		for i := range now {
			d := now[i] - before[i]
			if d%2 != 0 {
				return false
			}
			if d > 0 {
				reached++
			}
		}
		return reached >= minNodes
	})
	require.True(t, ok, "script calls per node before %v, now %v, want pairs on %d nodes or more", before, now, minNodes)
}

// cmdstatCalls reads "cmdstat_<name>:calls=N,..." from INFO commandstats.
func cmdstatCalls(info, name string) int64 {
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return -1 // never equal to a real count
		}
		return v
	}
	return 0
}

// allNodeErrors returns every *mutex.NodeError err carries. errors.As alone
// finds only the first; the library aggregates them in a *multierror.Error.
func allNodeErrors(err error) []*mutex.NodeError {
	var all []*mutex.NodeError
	var m *multierror.Error
	if !errors.As(err, &m) {
		var ne *mutex.NodeError
		if errors.As(err, &ne) {
			all = append(all, ne)
		}
		return all
	}
	for _, e := range m.Errors {
		var ne *mutex.NodeError
		if errors.As(e, &ne) {
			all = append(all, ne)
		}
	}
	return all
}
