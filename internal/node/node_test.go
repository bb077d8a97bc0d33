package node_test

import (
	"crypto/fips140"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// results collects the outcome of commands sent to a node.
type results chan node.Result

func (r results) Sent(int, time.Time)            {}
func (r results) Receive(_ int, res node.Result) { r <- res }

// call sends one script call to n and waits for its result.
func call(t *testing.T, n *node.Node, s *node.Script, keys []string, args ...any) node.Result {
	t.Helper()
	out := make(results, 1)
	n.Send(&node.Cmd{Script: s, Keys: keys, Args: args, To: out})
	select {
	case r := <-out:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
		return node.Result{}
	}
}

// Replies of any other shape than the scripts produce must be errors, never
// votes: a nil, a string "1", a float, a 2, or a bare integer where an array
// is expected.
func TestMalformedRepliesAreErrors(t *testing.T) {
	ok := []any{int64(1), int64(0), int64(0), "", int64(-1), int64(0), int64(-1)}
	tests := []struct {
		script  string
		parse   func(reply any) error
		replies []any
	}{
		{"flag", func(v any) error { _, err := node.ParseFlag("fence", v); return err },
			[]any{nil, "1", "OK", 1.0, int64(2), int64(-1), []any{int64(1)}, true}},
		{"release", func(v any) error { _, _, err := node.ParseRelease(v); return err },
			[]any{nil, "1", int64(1), []any{int64(1)}, []any{int64(4), ""}, []any{int64(-2), ""}, []any{int64(1), int64(2)}, []any{"1", ""}}},
		{"acquire", func(v any) error { _, err := node.ParseGrant(v, ""); return err },
			[]any{nil, int64(1), "1", []any{}, ok[:6], []any{int64(2), int64(0), int64(0), "", int64(-1), int64(0), int64(-1)},
				[]any{int64(1), int64(0), int64(-1), "", int64(-1), int64(0), int64(-1)}, []any{"1", int64(0), int64(0), "", int64(-1), int64(0), int64(-1)},
				[]any{int64(1), int64(0), int64(0), "", int64(-1), int64(0), int64(-2)}}},
		{"renew", func(v any) error { _, _, err := node.ParseRenew(v, 2); return err },
			[]any{nil, []any{int64(1)}, []any{int64(3), int64(1)}, []any{"1", int64(1)}}},
	}
	for _, tt := range tests {
		for _, reply := range tt.replies {
			assert.ErrorContains(t, tt.parse(reply), "unexpected reply", "%s %#v", tt.script, reply)
		}
	}
	_, err := node.ParseGrant(ok, "marker")
	assert.ErrorContains(t, err, "unexpected reply", "a marker was asked for and none came")
}

func TestTokensAreUniqueAndLongEnough(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		tok := node.NewToken()
		require.Len(t, tok, 26)
		require.False(t, seen[tok])
		seen[tok] = true
	}
}

// TestScripts checks each script's semantics on miniredis and on a real
// redis-server.
func TestScripts(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		redistest.SkipMiniredisInFIPSOnly(t)
		s := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		testScripts(t, c)
	})
	t.Run("redis-server", func(t *testing.T) {
		testScripts(t, redistest.StartOne(t).Client(t))
	})
}

// lock is the keys and arguments of one lock key's scripts.
type lock struct{ key, queue, expiries, tombs string }

func newLock(key string) lock {
	return lock{key, "{" + key + "}:q", "{" + key + "}:qx", "{" + key + "}:rel"}
}

func (l lock) acquire(t *testing.T, n *node.Node, token, id string, ticket int64, life string) node.Grant {
	t.Helper()
	r := call(t, n, node.AcquireScript, []string{l.key, l.queue, l.expiries}, token, 10000, id, ticket, life, "", "", "0")
	require.NoError(t, r.Err)
	g, err := node.ParseGrant(r.Reply, "")
	require.NoError(t, err)
	return g
}

func (l lock) release(t *testing.T, n *node.Node, token, mode, id string) (node.Release, string) {
	t.Helper()
	r := call(t, n, node.ReleaseScript, []string{l.key, l.queue, l.expiries, l.tombs}, token, "", mode, id, 0, 0, 10000)
	require.NoError(t, r.Err)
	status, head, err := node.ParseRelease(r.Reply)
	require.NoError(t, err)
	return status, head
}

func renew(t *testing.T, n *node.Node, keys []string, args ...any) []node.Renewal {
	t.Helper()
	r := call(t, n, node.RenewScript, keys, args...)
	require.NoError(t, r.Err)
	codes, errs, err := node.ParseRenew(r.Reply, len(keys))
	require.NoError(t, err)
	require.Nil(t, errs)
	return codes
}

func testScripts(t *testing.T, c *redis.Client) {
	ctx := t.Context()
	n := node.New(c, "n", clock.Real())
	l := newLock("lock")

	g := l.acquire(t, n, "mine", "", 0, "0")
	assert.Equal(t, node.Grant{Acquired: true, Fence: -1, MarkerAge: -time.Millisecond}, g, "SET NX on a free key")
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val())

	require.NoError(t, c.PExpire(ctx, "lock", time.Second).Err())
	assert.True(t, l.acquire(t, n, "mine", "", 0, "0").Acquired, "our own token counts as taken")
	assert.Greater(t, c.PTTL(ctx, "lock").Val(), 9*time.Second, "and its TTL is reset")

	g = l.acquire(t, n, "theirs", "w1", 100, "60000")
	assert.False(t, g.Acquired)
	assert.Greater(t, g.HolderTTL, 9*time.Second, "the holder's remaining TTL comes back")
	assert.Equal(t, 1, g.Waiting, "the refused caller is queued")
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val())

	codes := renew(t, n, []string{"lock"}, "theirs", 60000, "0")
	assert.Equal(t, []node.Renewal{node.OtherHolder}, codes, "renew is token-checked")
	status, _ := l.release(t, n, "theirs", "release", "")
	assert.Equal(t, node.Taken, status, "release is token-checked")
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val())

	assert.Equal(t, []node.Renewal{node.Extended}, renew(t, n, []string{"lock"}, "mine", 60000, "0"))
	assert.Greater(t, c.PTTL(ctx, "lock").Val(), 59*time.Second, "renew sets the TTL")

	status, head := l.release(t, n, "mine", "release", "")
	assert.Equal(t, node.Released, status)
	assert.Equal(t, "w1", head, "the release names the waiter first in line")
	assert.Zero(t, c.Exists(ctx, "lock").Val())
	status, _ = l.release(t, n, "mine", "release", "")
	assert.Equal(t, node.Tombstone, status, "a second copy of the release finds our tombstone")
	status, _ = l.release(t, n, "never", "release", "")
	assert.Equal(t, node.Missing, status, "a release that never held it finds nothing")

	// The key is free, but w1 is first in line: another caller is refused,
	// queued behind it, and w1 gets it.
	g = l.acquire(t, n, "late", "w2", 200, "60000")
	assert.False(t, g.Acquired)
	assert.Equal(t, node.Behind, g.HolderTTL)
	assert.Equal(t, 2, g.Waiting)
	g = l.acquire(t, n, "try", "", 0, "0")
	assert.False(t, g.Acquired, "a TryLock does not cut in either")
	assert.True(t, l.acquire(t, n, "first", "w1", 100, "60000").Acquired)
	assert.Equal(t, 1, int(c.ZCard(ctx, l.queue).Val()), "the winner left the queue")
	status, head = l.release(t, n, "first", "release", "w1")
	assert.Equal(t, node.Released, status)
	assert.Equal(t, "w2", head)
	status, _ = l.release(t, n, "-", "leave", "w2")
	assert.Equal(t, node.Missing, status)
	assert.Zero(t, c.Exists(ctx, l.queue).Val(), "a waiter that leaves is forgotten")

	assert.Equal(t, []node.Renewal{node.Gone}, renew(t, n, []string{"lock"}, "mine", 60000, "0"))
	assert.Zero(t, c.Exists(ctx, "lock").Val(), "renew never recreates a key unless asked")
	assert.Equal(t, []node.Renewal{node.Restored}, renew(t, n, []string{"lock"}, "mine", 60000, "1"))
	assert.Equal(t, "mine", c.Get(ctx, "lock").Val(), "asked, it restores a missing key")

	require.NoError(t, c.Set(ctx, "forever", "theirs", 0).Err())
	g = newLock("forever").acquire(t, n, "mine", "", 0, "0")
	assert.False(t, g.Acquired)
	assert.Equal(t, -time.Millisecond, g.HolderTTL, "a key without TTL reports -1")

	require.NoError(t, c.HSet(ctx, "hash", "f", "v").Err())
	h := newLock("hash")
	r := call(t, n, node.AcquireScript, []string{h.key, h.queue, h.expiries}, "mine", 1000, "", 0, "0", "", "", "0")
	assert.ErrorContains(t, r.Err, "WRONGTYPE")
	r = call(t, n, node.ReleaseScript, []string{h.key, h.queue, h.expiries, h.tombs}, "mine", "", "release", "", 0, 0, 0)
	assert.ErrorContains(t, r.Err, "WRONGTYPE")
	r = call(t, n, node.RenewScript, []string{"hash", "lock"}, "mine", 1000, "0", "mine", 1000, "0")
	require.NoError(t, r.Err)
	codes, errs, err := node.ParseRenew(r.Reply, 2)
	require.NoError(t, err)
	assert.ErrorContains(t, errs[0], "WRONGTYPE", "one key of the wrong type fails alone")
	assert.Equal(t, node.Extended, codes[1])
}

// A tombstone is one key per token beside the lock key, in its hash slot,
// living the tombstone's life: it answers while it lives, and nothing is
// left to prune.
func TestATombstoneIsAKeyThatExpires(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	ctx := t.Context()
	n := node.New(c, "n", clock.Real())
	l := newLock("tomb")
	require.True(t, l.acquire(t, n, "a", "", 0, "0").Acquired)
	status, _ := l.release(t, n, "a", "release", "")
	require.Equal(t, node.Released, status)
	pttl := c.PTTL(ctx, l.tombs+":a").Val()
	assert.Positive(t, pttl)
	assert.LessOrEqual(t, pttl, 10*time.Second, "it lives the tombstone's life")
	status, _ = l.release(t, n, "a", "release", "")
	assert.Equal(t, node.Tombstone, status, "a live tombstone answers")
	require.NoError(t, c.Del(ctx, l.tombs+":a").Err()) // as when it expires
	status, _ = l.release(t, n, "a", "release", "")
	assert.Equal(t, node.Missing, status, "a tombstone gone does not")
	assert.Zero(t, c.Exists(ctx, l.tombs).Val(), "no set of tombstones to prune")
}

// A failed attempt's release keeps the caller's place ("retry") with a TTL
// on the queue and its expiries, also when pruning the lapsed waiters
// emptied the queue, which Redis then deleted: here, a queue whose TTL was
// set by a waiter since gone and that holds only a lapsed one (as a waiter
// that stopped renewing, say cut off from the node, leaves it).
func TestARetryKeepsTheQueuesTTLWhenPruningEmptiedIt(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	ctx := t.Context()
	n := node.New(c, "n", clock.Real())
	for _, tc := range []struct {
		name    string
		release *node.Script
		names   int
	}{
		{"mutex", node.ReleaseScript, 1},
		{"read", node.ReadReleaseScript, 1},
		{"write", node.WriteReleaseScript, 1},
		{"multi", node.MultiReleaseScript, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var keys, kept []string
			for i := range tc.names {
				l := newLock(fmt.Sprintf("%s%d", tc.name, i))
				keys, kept = append(keys, l.key, l.queue, l.expiries, l.tombs), append(kept, l.queue, l.expiries)
				for _, k := range []string{l.queue, l.expiries} {
					require.NoError(t, c.ZAdd(ctx, k, redis.Z{Score: 1, Member: "lapsed"}).Err())
					require.NoError(t, c.PExpire(ctx, k, time.Minute).Err())
				}
			}
			r := call(t, n, tc.release, keys, "a", "", "retry", "w", 2, 5000, 0)
			require.NoError(t, r.Err)
			_, head, err := node.ParseRelease(r.Reply)
			require.NoError(t, err)
			assert.Equal(t, "w", head, "the lapsed waiter is pruned")
			for _, k := range kept {
				assert.Equal(t, []string{"w"}, c.ZRange(ctx, k, 0, -1).Val(), k)
				pttl := c.PTTL(ctx, k).Val()
				assert.True(t, pttl > 0 && pttl <= 5*time.Second, "%s's TTL %v", k, pttl)
			}
		})
	}
}

// Commands reach a node in the order they were sent, many to a round trip.
func TestCommandsKeepTheirOrder(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	n := node.New(c, "n", clock.Real())
	out := make(results, 200)
	for i := range 100 {
		tok := fmt.Sprint("t", i)
		n.Send(&node.Cmd{Script: node.AcquireScript, Keys: []string{"order", "{order}:q", "{order}:qx"},
			Args: []any{tok, 10000, "", 0, "0", "", "", "0"}, To: out, Index: 2 * i})
		n.Send(&node.Cmd{Script: node.ReleaseScript, Keys: []string{"order", "{order}:q", "{order}:qx", "{order}:rel"},
			Args: []any{tok, "", "release", "", 0, 0, 0}, To: out, Index: 2*i + 1})
	}
	n.Flush()
	require.Len(t, out, 200)
	for range 200 {
		r := <-out
		require.NoError(t, r.Err)
	}
	assert.Zero(t, c.Exists(t.Context(), "order").Val(), "every acquire was released after it")
}

// What waits for Later is sent once the node answers a probe of its own,
// with nothing else sent to it; Close drops it instead.
func TestLaterIsSentAfterAProbeUnlessClosed(t *testing.T) {
	srv := redistest.StartOne(t)
	admin := srv.Client(t)
	acquire := func(n *node.Node, key string) {
		n.Later(node.AcquireScript, []string{key, "{" + key + "}:q", "{" + key + "}:qx"}, nil,
			[]any{"tok", 10000, "", 0, "0", "", "", "0"})
	}
	closed, open := node.New(srv.Client(t), "closed", clock.Real()), node.New(srv.Client(t), "open", clock.Real())
	acquire(closed, "dropped")
	closed.Close(nil)
	acquire(open, "sent")
	require.Eventually(t, func() bool { return admin.Exists(t.Context(), "sent").Val() == 1 }, 5*time.Second, 10*time.Millisecond,
		"a node answering probes never got what waited for it")
	assert.Zero(t, admin.Exists(t.Context(), "dropped").Val(), "a closed node probed and sent what waited")
}

// A node that lost its script cache answers NOSCRIPT; the command is sent
// again in full and the result says so.
func TestScriptFlushIsReported(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	n := node.New(c, "n", clock.Real())
	r := call(t, n, node.RenewScript, []string{"k"}, "t", 1000, "0")
	require.NoError(t, r.Err)
	assert.False(t, r.NoScript, "the first call loads the script")
	require.NoError(t, c.ScriptFlush(t.Context()).Err())
	r = call(t, n, node.RenewScript, []string{"k"}, "t", 1000, "0")
	require.NoError(t, r.Err)
	assert.True(t, r.NoScript)
	r = call(t, n, node.RenewScript, []string{"k"}, "t", 1000, "0")
	assert.False(t, r.NoScript)
}

// A node met for the first time (a new Redlock, a new process) is sent a
// script by digest, not by source, when the digest is known and the server
// may cache the script for other clients; when it does not, the source
// follows, and the answer is not a lost script cache. The digest is
// computed here, except in FIPS 140 mode, where the first SCRIPT LOAD tells.
func TestFirstCallSendsTheDigestWhenTheServerMayHaveTheScript(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	stats := func() [3]int64 { // EVAL, EVALSHA, SCRIPT LOAD since the last call
		var n [3]int64
		for line := range strings.Lines(c.Info(t.Context(), "commandstats").Val()) {
			for i, name := range []string{"eval", "evalsha", "script|load"} {
				if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
					n[i], _ = strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				}
			}
		}
		require.NoError(t, c.ConfigResetStat(t.Context()).Err())
		return n
	}
	first := func(s *node.Script) {
		r := call(t, node.New(c, "n", clock.Real()), s, []string{"k"})
		require.NoError(t, r.Err)
		require.False(t, r.NoScript, "a script never run by this node is not a lost cache")
	}
	probe := node.NewScript("probe", "return 1 -- "+node.NewToken())
	stats()
	first(probe) // the server lacks it
	if fips140.Enabled() {
		assert.Equal(t, [3]int64{1, 0, 1}, stats(), "FIPS 140 mode: SCRIPT LOAD and EVAL")
	} else {
		assert.Equal(t, [3]int64{1, 1, 0}, stats(), "EVALSHA, NOSCRIPT, then EVAL")
	}
	first(probe) // a new node: the server has it now
	assert.Equal(t, [3]int64{0, 1, 0}, stats(), "EVALSHA only")

	// A set's own copy (Script.Unique) goes by source the first time, so
	// that a NOSCRIPT for it keeps meaning a restart.
	first(probe.Unique("set"))
	assert.Equal(t, int64(0), stats()[1], "no EVALSHA")
}

func TestErrorRepliesPassThrough(t *testing.T) {
	redistest.SkipMiniredisInFIPSOnly(t)
	s := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s.SetError("READONLY You can't write against a read only replica.")
	r := call(t, node.New(c, "n", clock.Real()), node.RenewScript, []string{"k"}, "t", 1000, "0")
	var re redis.Error
	assert.True(t, errors.As(r.Err, &re))
	assert.ErrorContains(t, r.Err, "READONLY")
}

// Redis refuses a long command from an unauthenticated connection with a
// protocol error and closes the connection: the commands behind it in the
// same round trip (or sent before the client saw the connection close)
// were never run, for the same cause, and say so rather than "EOF".
func TestUnauthenticatedBatchNamesTheCause(t *testing.T) {
	s := redistest.StartOne(t, redistest.WithPassword("s3cret"))
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	n := node.New(c, "n", clock.Real())
	r := call(t, n, node.AcquireScript, []string{"auth", "{auth}:q", "{auth}:qx"}, "t", 10000, "", 0, "0", "", "", "0")
	require.ErrorContains(t, r.Err, "NOAUTH")
	out := make(results, 50)
	for i := range 50 {
		n.Send(&node.Cmd{Script: node.AcquireScript, Keys: []string{"auth", "{auth}:q", "{auth}:qx"},
			Args: []any{fmt.Sprint("t", i), 10000, "", 0, "0", "", "", "0"}, To: out, Index: i})
	}
	n.Flush()
	require.Len(t, out, 50)
	for range 50 {
		assert.ErrorContains(t, (<-out).Err, "NOAUTH")
	}
}

// A round trip that fails as a whole before any command in it ran (here,
// SELECT of a database the server does not have, when the connection
// opens) gives every command that error, not an empty reply (review 12:
// Inspect said "unexpected reply to the scan script: <nil> <nil>").
func TestAFailedRoundTripGivesEveryCommandItsError(t *testing.T) {
	s := redistest.StartOne(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DB: 99, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	n := node.New(c, "n", clock.Real())
	out := make(results, 3)
	for i := range 3 { // a new script: SCRIPT LOAD and EVAL in one pipeline
		n.Send(&node.Cmd{Script: node.ScanScript, Keys: []string{"k"}, Args: []any{"0", "x*", 10}, To: out, Index: i})
	}
	n.Flush()
	require.Len(t, out, 3)
	for range 3 {
		assert.ErrorContains(t, (<-out).Err, "DB index is out of range")
	}
}

// departures records when each command left, and its result.
type departures struct {
	mu  sync.Mutex
	at  map[time.Time]int
	out chan node.Result
}

func (d *departures) Sent(_ int, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at[at]++
}
func (d *departures) Receive(_ int, r node.Result) { d.out <- r }

// Commands queued together are split into round trips of bounded size, so
// that one round trip carrying thousands of lease renewals cannot hold every
// command in it past its per-node timeout, which runs from its departure.
func TestLargeBatchesGoInSeveralRoundTrips(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	n := node.New(c, "n", clock.Real())
	const calls, keysPerCall = 12, 1000
	d := &departures{at: map[time.Time]int{}, out: make(chan node.Result, calls)}
	for i := range calls {
		keys := make([]string, keysPerCall)
		args := make([]any, 0, 3*keysPerCall)
		for k := range keys {
			keys[k] = fmt.Sprintf("lease:%d:%d", i, k)
			args = append(args, "t", 1000, "0")
		}
		n.Send(&node.Cmd{Script: node.RenewScript, Keys: keys, Args: args, To: d, Index: i})
	}
	n.Flush()
	require.Len(t, d.out, calls)
	for range calls {
		require.NoError(t, (<-d.out).Err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// 4,000 arguments a call: each call is a round trip of its own, except
	// perhaps the first, sent alone before the others were queued.
	assert.GreaterOrEqual(t, len(d.at), calls-1, "round trips for %d calls of %d keys", calls, keysPerCall)
}

// Metadata replaced in the lock key's last millisecond, when PTTL reads 0,
// still expires with it. Each try gives the key its last millisecond at
// once; without the fix, a record without TTL came within 0.2s in 5 of 5 runs.
func TestMetadataSetInTheKeysLastMillisecondExpires(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	ctx := t.Context()
	n := node.New(c, "n", clock.Real())
	key, record := "{meta}", "{meta}:m"
	for range 1000 {
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, c.Set(ctx, key, "a", 0).Err())
		require.NoError(t, c.PExpireAt(ctx, key, now.Truncate(time.Millisecond).Add(time.Millisecond)).Err())
		r := call(t, n, node.MetaSetScript, []string{key, record}, "a", "v", "")
		require.NoError(t, r.Err)
		require.NotEqual(t, time.Duration(-1), c.PTTL(ctx, record).Val(), "the metadata record has no TTL")
		require.NoError(t, c.Del(ctx, key, record).Err())
	}
}
