package safety_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
)

// badNode is one node that is not a usable primary, for TestBadNode.
type badNode struct {
	name string
	// start sets the bad node up, using healthy (four healthy primaries) if
	// it needs to, and returns the client the lock set uses for it. The
	// client fails fast: no retries, one dial attempt.
	start func(t *testing.T, healthy []*redistest.Server) *redis.Client
	// plant, if set, prepares the bad node for a lock on key, before the key
	// is used.
	plant func(t *testing.T, c *redis.Client, key string)
	// marker must appear in the bad node's *mutex.NodeError.
	marker *regexp.Regexp
	// refuses: it refuses this client as configured (credentials, ACL), so
	// LockContext stops at once rather than retry until ctx ends.
	refuses bool
	// after, if set, checks the bad node once the test is done with keys.
	after func(t *testing.T, c *redis.Client, keys []string)
}

// TestBadNode puts one node that is not a usable primary into a set of
// otherwise healthy real redis-servers, one kind of bad node per subtest:
//
//   - among four healthy nodes (5 nodes, majority 3) it must cost nothing:
//     LockContext, TryLockContext, ExtendContext and UnlockContext succeed and
//     no key is left on the healthy nodes;
//   - with only one healthy node and one killed node beside it (3 nodes,
//     majority 2) acquisition fails, and the error must say so truthfully:
//     ErrNotObtained and ErrNodesUnavailable (never "held by another owner"),
//     with a *mutex.NodeError naming the bad node and carrying its failure;
//     the healthy node is left with no key.
func TestBadNode(t *testing.T) {
	healthy := redistest.Start(t, 4)
	dead := redistest.StartOne(t)
	deadAddr := dead.Addr()
	dead.Kill() // its port now refuses connections, like a crashed node

	kinds := []badNode{
		{
			name: "replica",
			start: func(t *testing.T, healthy []*redistest.Server) *redis.Client {
				master := healthy[3]
				// Full sync at once, not after the default 5s wait for more
				// replicas to join a diskless transfer.
				require.Equal(t, "OK", master.Do(t, "CONFIG", "SET", "repl-diskless-sync-delay", "0"))
				r := redistest.StartOne(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
				waitReplicaLinkUp(t, r)
				return failFastClient(t, r.Addr())
			},
			marker: regexp.MustCompile(`READONLY`),
		},
		{
			name: "requirepass without a password",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				s := redistest.StartOne(t, redistest.WithPassword("s3cret"))
				return failFastClient(t, s.Addr()) // no password
			},
			marker:  regexp.MustCompile(`NOAUTH`),
			refuses: true,
		},
		{
			name: "ACL user without EVAL",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				s := redistest.StartOne(t)
				require.Equal(t, "OK", s.Do(t, "ACL", "SETUSER", "locker", "reset", "on", ">pw", "~*", "&*",
					"+@all", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro"))
				return failFastClient(t, s.Addr(), func(o *redis.Options) { o.Username, o.Password = "locker", "pw" })
			},
			marker:  regexp.MustCompile(`NOPERM`),
			refuses: true,
		},
		{
			name: "nothing listens",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				return failFastClient(t, closedPort(t))
			},
			marker: regexp.MustCompile(`connection refused`),
		},
		{
			name: "HTTP server",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				return failFastClient(t, junkServer(t, []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")))
			},
			marker: regexp.MustCompile(`redis: can't parse .*HTTP/1\.1 400 Bad Request`),
		},
		{
			name: "binary garbage",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				return failFastClient(t, junkServer(t, []byte("\x00\xff\xfe\x16\x03\x01 not redis\r\n")))
			},
			marker: regexp.MustCompile(`redis: can't parse .*not redis`),
		},
		{
			name: "truncated reply",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				// The start of a RESP3 map, then the server hangs up.
				return failFastClient(t, junkServer(t, []byte("%3\r\n+server\r\n")))
			},
			marker: regexp.MustCompile(`\bEOF\b`),
		},
		{
			name: "key of another type",
			start: func(t *testing.T, _ []*redistest.Server) *redis.Client {
				return failFastClient(t, redistest.StartOne(t).Addr())
			},
			plant: func(t *testing.T, c *redis.Client, key string) {
				require.NoError(t, c.HSet(t.Context(), key, "field", "value").Err())
			},
			marker: regexp.MustCompile(`WRONGTYPE`),
			after: func(t *testing.T, c *redis.Client, keys []string) {
				for _, key := range keys {
					assert.Equal(t, "hash", c.Type(t.Context(), key).Val(), "the foreign hash %q is untouched", key)
					assert.Equal(t, "value", c.HGet(t.Context(), key, "field").Val())
				}
				assert.EqualValues(t, len(keys), c.DBSize(t.Context()).Val(), "and nothing else was written")
			},
		},
	}
	for i, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			bad := kind.start(t, healthy)
			badAddr := bad.Options().Addr
			admins := adminClientsFor(t, healthy)
			// Every call locks its own name, so a command one call left in
			// flight can never meet the next call's acquire.
			var keys []string
			newKey := func(call string) string {
				key := fmt.Sprintf("bad-node:%d:%s", i, call)
				if kind.plant != nil {
					kind.plant(t, bad, key)
				}
				keys = append(keys, key)
				return key
			}

			t.Run("healthy majority", func(t *testing.T) {
				clients := redistest.Clients(t, healthy)
				// The bad node in the middle: order must not matter.
				set := []redis.UniversalClient{clients[0], clients[1], bad, clients[2], clients[3]}
				rs := lockSet(t, set)
				acquire := []struct {
					name string
					lock func(*mutex.Mutex, context.Context) error
				}{
					{"LockContext", (*mutex.Mutex).LockContext},
					{"TryLockContext", (*mutex.Mutex).TryLockContext},
				}
				for _, a := range acquire {
					key := newKey("majority " + a.name)
					m := rs.NewMutex(key)
					var err error
					require.NotPanics(t, func() { err = a.lock(m, t.Context()) })
					require.NoError(t, err, a.name)
					assert.GreaterOrEqual(t, tokenHolders(t, admins, key, m.Value()), 3, "%s: a majority holds the token when the call returns", a.name)
					// Wait for the fourth healthy node too, so that its key
					// going away below proves its release has run.
					require.True(t, pollUntil(func() bool { return tokenHolders(t, admins, key, m.Value()) == len(admins) }),
						"%s: every healthy node takes the key", a.name)
					require.NoError(t, m.ExtendContext(t.Context()), "%s: extend", a.name)
					assert.True(t, m.Until().After(time.Now().Add(7*time.Second)), "%s: extend gives the full TTL's validity again", a.name)
					require.NoError(t, m.UnlockContext(t.Context()), "%s: unlock", a.name)
					assert.True(t, m.Until().IsZero(), a.name)
					requireGone(t, admins, key)
				}
			})

			t.Run("failure is reported", func(t *testing.T) {
				healthyOne := healthy[0].Client(t)
				deadClient := failFastClient(t, deadAddr)
				rs := lockSet(t, []redis.UniversalClient{healthyOne, bad, deadClient})
				// Closed before its clients (cleanups run last first): a
				// rollback's release still queued behind an acquire that
				// answers late is sent, not cut off by a closed client.
				t.Cleanup(func() { _ = rs.Close() })
				// The healthy node never fails or says No here, so the round
				// is lost only once both the bad and the dead node failed:
				// the bad node's error is always in the result. (Three or
				// more quick attempts could find the healthy node's lane
				// full of commands still in flight and count it as failed.)
				attempts := []struct {
					name  string
					tries int64
					lock  func(*mutex.Mutex, context.Context) error
				}{
					{"TryLockContext", 1, (*mutex.Mutex).TryLockContext},
					{"LockContext WithTries(2)", 2, (*mutex.Mutex).LockContext},
				}
				for _, a := range attempts {
					key := newKey("failure " + a.name)
					m := rs.NewMutex(key, mutex.WithTries(2), mutex.WithRetryDelay(time.Millisecond, time.Millisecond))
					var err error
					require.NotPanics(t, func() { err = a.lock(m, t.Context()) })
					requireNodesUnavailable(t, err, badAddr, kind.marker, a.name)
					assert.True(t, m.Until().IsZero(), a.name)
					// The round may have been decided before the healthy
					// node answered; the release is then queued behind its
					// acquire (or the acquire withdrawn unsent).
					requireGone(t, admins[:1], key)
				}

				// Bounded by ctx, with unlimited tries: the error keeps the
				// last attempt's cause alongside ctx's; or, from a node that
				// refuses the client as configured, it comes at once, since
				// waiting does not change that. On the bad node alone (a
				// single-node set), every attempt is lost to its failure.
				key := newKey("failure LockContext until ctx ends")
				ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
				defer cancel()
				m := lockSet(t, []redis.UniversalClient{bad}).NewMutex(key, mutex.WithRetryDelay(time.Millisecond, 10*time.Millisecond))
				var err error
				require.NotPanics(t, func() { err = m.LockContext(ctx) })
				if kind.refuses {
					require.NotErrorIs(t, err, context.DeadlineExceeded, "stopped at the refusal")
				} else {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
				requireNodesUnavailable(t, err, badAddr, kind.marker, "LockContext until ctx ends")
			})

			if kind.after != nil {
				kind.after(t, bad, keys)
			}
			for _, key := range keys {
				requireGone(t, admins, key)
			}
		})
	}
}

// requireNodesUnavailable checks that err reports a failed acquisition
// caused by failing nodes, and that one of its *mutex.NodeError values names
// badAddr and matches marker.
func requireNodesUnavailable(t *testing.T, err error, badAddr string, marker *regexp.Regexp, call string) {
	t.Helper()
	require.Error(t, err, call)
	require.ErrorIs(t, err, mutex.ErrNotObtained, call)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "%s: %v", call, err)
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable, call)
	assert.NotErrorIs(t, err, mutex.ErrNotHeld, call)
	assert.NotErrorIs(t, err, mutex.ErrInvalid, call)
	assert.NotContains(t, err.Error(), "held by another owner", call)
	var first *mutex.NodeError
	require.ErrorAs(t, err, &first, call)
	var found *mutex.NodeError
	for _, ne := range allNodeErrors(err) {
		if ne.Node == badAddr {
			found = ne
		}
	}
	require.NotNil(t, found, "%s: no *mutex.NodeError for the bad node %s in %v", call, badAddr, err)
	t.Logf("%s: %v", call, found)
	assert.Regexp(t, marker, found.Error(), call)
	assert.Regexp(t, marker, found.Err.Error(), "%s: the node's own error carries the cause", call)
	assert.NotErrorIs(t, found, mutex.ErrNodeTimeout, "%s: the bad node answered; it did not time out", call)
}

// waitReplicaLinkUp polls INFO replication until the replica is in sync with
// its master (master_link_status:up), at most 10s. Redis signals this in no
// other way.
func waitReplicaLinkUp(t *testing.T, r *redistest.Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		info, _ := r.Do(t, "INFO", "replication").(string)
		if regexp.MustCompile(`(?m)^master_link_status:up\r?$`).MatchString(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s did not connect to its master within 10s:\n%s", r.Addr(), info)
		}
		<-tick.C
	}
}

// closedPort returns the address of a loopback port that was just free and
// on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// junkServer starts a TCP server on loopback that is not Redis: on each
// connection it reads whatever the client sent first, answers with reply,
// closes its side for writing and drains the connection until the client
// hangs up (at most 2s). It returns the server's address; the server and its
// goroutines end at t's cleanup, which must run after the cleanup that closes
// the clients connected to it, so start the server before making them.
func junkServer(t *testing.T, reply []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil {
					return
				}
				if _, err := c.Write(reply); err != nil {
					return
				}
				_ = c.(*net.TCPConn).CloseWrite()
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}
