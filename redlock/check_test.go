package redlock_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// checkSet returns a node set over addrs, with clients set as NewFromURLs
// sets them (one dial attempt, no retries), as user when not "".
func checkSet(t *testing.T, addrs []string, user, password string, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{
			Addr: a, Username: user, Password: password,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxRetries: -1, DialerRetries: 1,
		})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	rs, err := redlock.New(clients, opts...)
	require.NoError(t, err)
	return rs
}

// findings returns the report's findings on node about setting.
func findings(rep *redlock.Report, node, setting string) []redlock.Finding {
	var out []redlock.Finding
	for _, f := range rep.Findings {
		if f.Node == node && f.Setting == setting {
			out = append(out, f)
		}
	}
	return out
}

func check(t *testing.T, rs *redlock.Redlock) *redlock.Report {
	t.Helper()
	rep, err := rs.Check(t.Context())
	require.NoError(t, err)
	require.Len(t, rep.Nodes, len(rs.Nodes()))
	t.Logf("report:\n%s", rep)
	return rep
}

func TestCheckHealthySetIsOK(t *testing.T) {
	servers := redistest.Start(t, 3, redistest.WithAOF())
	rs := checkSet(t, redistest.Addrs(servers), "", "")
	rep := check(t, rs)
	assert.True(t, rep.OK())
	assert.Empty(t, rep.Findings)
	assert.Equal(t, "3 nodes checked: nothing found", rep.String())
	for i, n := range rep.Nodes {
		assert.Equal(t, servers[i].Addr(), n.Node)
		assert.True(t, n.Checked && n.Reachable)
		assert.NotEmpty(t, n.Version)
		assert.NotEmpty(t, n.RunID)
		assert.Positive(t, n.RTT)
	}
}

func TestCheckEvictingPolicies(t *testing.T) {
	allkeys := redistest.StartOne(t, redistest.WithAOF(), redistest.WithArgs("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"))
	volatile := redistest.StartOne(t, redistest.WithAOF(), redistest.WithArgs("--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"))
	unlimited := redistest.StartOne(t, redistest.WithAOF(), redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
	rs := checkSet(t, []string{allkeys.Addr(), volatile.Addr(), unlimited.Addr()}, "", "")
	rep := check(t, rs)
	assert.False(t, rep.OK())

	f := findings(rep, allkeys.Addr(), "maxmemory-policy")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
	assert.Equal(t, "allkeys-lru", f[0].Value)
	assert.Contains(t, rep.String(), allkeys.Addr()+": maxmemory-policy=allkeys-lru: unfit: ")

	f = findings(rep, volatile.Addr(), "maxmemory-policy")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
	assert.Contains(t, f[0].Message, "keys that have a TTL first")

	f = findings(rep, unlimited.Addr(), "maxmemory-policy")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Note, f[0].Severity, "no maxmemory: nothing is evicted yet")
}

func TestCheckReplica(t *testing.T) {
	primary := redistest.StartOne(t, redistest.WithAOF())
	replica := redistest.StartOne(t, redistest.WithAOF(), redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(primary.Port())))
	rs := checkSet(t, []string{primary.Addr(), replica.Addr()}, "", "")
	rep := check(t, rs)
	assert.False(t, rep.OK())
	assert.Empty(t, findings(rep, primary.Addr(), "role"))
	f := findings(rep, replica.Addr(), "role")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
	assert.Equal(t, "slave", f[0].Value)
}

func TestCheckSameServerTwice(t *testing.T) {
	servers := redistest.Start(t, 2, redistest.WithAOF())
	alias := net.JoinHostPort("localhost", strconv.Itoa(servers[0].Port()))
	rs := checkSet(t, []string{servers[0].Addr(), servers[1].Addr(), alias}, "", "")
	rep := check(t, rs)
	assert.False(t, rep.OK())
	f := findings(rep, alias, "run_id")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
	assert.Contains(t, f[0].Message, servers[0].Addr())
	assert.Empty(t, findings(rep, servers[0].Addr(), "run_id"))
}

func TestCheckDownNode(t *testing.T) {
	servers := redistest.Start(t, 2, redistest.WithAOF())
	down := "127.0.0.1:" + freePort(t)
	rs := checkSet(t, []string{servers[0].Addr(), servers[1].Addr(), down}, "", "")
	rep := check(t, rs)
	assert.False(t, rep.OK())
	f := findings(rep, down, "")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
	assert.Contains(t, f[0].Message, "unreachable")
	assert.False(t, rep.Nodes[2].Reachable)
	assert.True(t, rep.Nodes[2].Checked)
	assert.Len(t, rep.Findings, 1, "the other nodes are fine")
}

func TestCheckPersistence(t *testing.T) {
	s := redistest.StartOne(t) // no AOF, no snapshots
	rep := check(t, checkSet(t, []string{s.Addr()}, "", ""))
	f := findings(rep, s.Addr(), "appendonly")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Risky, f[0].Severity)
	assert.Equal(t, "no", f[0].Value)
	assert.False(t, rep.OK())

	rep = check(t, checkSet(t, []string{s.Addr()}, "", "", redlock.WithRestartQuarantine(10*time.Second)))
	f = findings(rep, s.Addr(), "appendonly")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Note, f[0].Severity)
	assert.Contains(t, f[0].Message, "restart quarantine (10s)")
	assert.True(t, rep.OK())

	everysec := redistest.StartOne(t, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "everysec"))
	rep = check(t, checkSet(t, []string{everysec.Addr()}, "", ""))
	f = findings(rep, everysec.Addr(), "appendfsync")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Risky, f[0].Severity)
	assert.Equal(t, "everysec", f[0].Value)
}

func TestCheckLatencyAgainstNodeTimeout(t *testing.T) {
	s := redistest.StartOne(t, redistest.WithAOF())
	rep := check(t, checkSet(t, []string{s.Addr()}, "", "", redlock.WithNodeTimeout(time.Nanosecond)))
	f := findings(rep, s.Addr(), "latency")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
}

// aclUser creates an ACL user on s with the given rules besides a password
// and every key and channel.
func aclUser(t *testing.T, s *redistest.Server, name, rules string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "on", ">pw", "~*", "&*"}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	require.NoError(t, s.Client(t).Do(t.Context(), args...).Err())
}

func TestCheckACL(t *testing.T) {
	s := redistest.StartOne(t, redistest.WithAOF())
	t.Run("without ACL DRYRUN: by the commands' errors", func(t *testing.T) {
		aclUser(t, s, "nodryrun", "+@all -eval -publish -acl -config")
		rep := check(t, checkSet(t, []string{s.Addr()}, "nodryrun", "pw"))
		assert.False(t, rep.OK())
		var unfit, risky, notes []string
		for _, f := range findings(rep, s.Addr(), "acl") {
			switch f.Severity {
			case redlock.Unfit:
				unfit = append(unfit, f.Value)
			case redlock.Risky:
				risky = append(risky, f.Value)
			case redlock.Note:
				notes = append(notes, f.Message)
			}
		}
		assert.Equal(t, []string{"-eval"}, unfit)
		assert.Equal(t, []string{"-publish"}, risky)
		require.Len(t, notes, 1)
		assert.Contains(t, notes[0], "ACL DRYRUN is not available")
		conf := findings(rep, s.Addr(), "CONFIG")
		require.Len(t, conf, 1, "CONFIG GET refused: a note, and settings from INFO")
		assert.Equal(t, redlock.Note, conf[0].Severity)
		assert.Len(t, findings(rep, s.Addr(), "appendfsync"), 1, "appendfsync cannot be read from INFO")
	})
	t.Run("without ACL DRYRUN: a command the scripts call, the keys", func(t *testing.T) {
		aclUser(t, s, "noexists", "+@all -exists -acl")
		rep := check(t, checkSet(t, []string{s.Addr()}, "noexists", "pw"))
		f := findings(rep, s.Addr(), "acl")
		require.NotEmpty(t, f)
		assert.Equal(t, redlock.Unfit, f[0].Severity)
		assert.Equal(t, "-exists", f[0].Value)

		require.NoError(t, s.Client(t).Do(t.Context(), "ACL", "SETUSER", "otherkeys", "on", ">pw", "~other:*", "&*", "+@all", "-acl").Err())
		rep = check(t, checkSet(t, []string{s.Addr()}, "otherkeys", "pw", redlock.WithKeyPrefix("locks:")))
		f = findings(rep, s.Addr(), "acl")
		require.NotEmpty(t, f)
		assert.Equal(t, redlock.Unfit, f[0].Severity)
		assert.Equal(t, "~locks:quorumlock:check", f[0].Value)
		assert.Contains(t, f[0].Message, "give it ~locks:*")
	})
	t.Run("with ACL DRYRUN", func(t *testing.T) {
		aclUser(t, s, "dryrun", "+@all -evalsha -zadd -publish")
		rep := check(t, checkSet(t, []string{s.Addr()}, "dryrun", "pw"))
		assert.False(t, rep.OK())
		f := findings(rep, s.Addr(), "acl")
		require.Len(t, f, 2)
		assert.Equal(t, redlock.Unfit, f[0].Severity)
		assert.Equal(t, "-evalsha -zadd", f[0].Value)
		assert.Equal(t, redlock.Risky, f[1].Severity)
		assert.Equal(t, "-publish", f[1].Value)
		assert.Contains(t, rep.String(), s.Addr()+`: acl=-evalsha -zadd: unfit: user "dryrun" may not run EVALSHA, ZADD`)

		// What the read-write lock's, Inspect's and Leader's scripts call.
		aclUser(t, s, "nohash", "+@all -type -hget")
		f = findings(check(t, checkSet(t, []string{s.Addr()}, "nohash", "pw")), s.Addr(), "acl")
		require.Len(t, f, 1)
		assert.Equal(t, "-type -hget", f[0].Value)

		rep = check(t, checkSet(t, []string{s.Addr()}, "dryrun", "pw", redlock.WithoutNotifications()))
		assert.Len(t, findings(rep, s.Addr(), "acl"), 1, "PUBLISH is not needed without notifications")

		require.NoError(t, s.Client(t).Do(t.Context(), "ACL", "SETUSER", "dryrunkeys", "on", ">pw", "~other:*", "&*", "+@all").Err())
		rep = check(t, checkSet(t, []string{s.Addr()}, "dryrunkeys", "pw", redlock.WithKeyPrefix("locks:")))
		f = findings(rep, s.Addr(), "acl")
		require.Len(t, f, 1)
		assert.Equal(t, "~locks:quorumlock:check", f[0].Value)
	})
	keys, err := s.Client(t).Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "Check writes no key")
}

func TestCheckEndedContext(t *testing.T) {
	servers := redistest.Start(t, 3, redistest.WithAOF())
	rs := checkSet(t, redistest.Addrs(servers), "", "")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rep, err := rs.Check(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, rep)
	assert.Len(t, rep.Nodes, 3)
	assert.False(t, rep.OK())
	assert.Contains(t, rep.String(), "not checked")
}

// A node that accepts connections but never answers: when ctx ends, Check
// returns at once with the other nodes' reports and the ctx error.
func TestCheckContextEndsMidCheck(t *testing.T) {
	servers := redistest.Start(t, 3, redistest.WithAOF())
	rs := checkSet(t, redistest.Addrs(servers), "", "")
	servers[2].Pause()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := rs.Check(ctx)
	assert.Less(t, time.Since(start), 900*time.Millisecond, "returned when ctx ended, not at the client's read timeout")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotNil(t, rep)
	assert.True(t, rep.Nodes[0].Checked)
	assert.True(t, rep.Nodes[1].Checked)
	assert.False(t, rep.Nodes[2].Checked)
	assert.False(t, rep.OK())
	assert.Contains(t, rep.String(), servers[2].Addr()+": not checked")
	assert.Empty(t, rep.Findings)
}

func TestCheckMisuse(t *testing.T) {
	var rs *redlock.Redlock
	_, err := rs.Check(t.Context())
	require.ErrorIs(t, err, mutex.ErrInvalid)
	var nilCtx context.Context
	_, err = checkSet(t, []string{"127.0.0.1:1"}, "", "").Check(nilCtx)
	require.ErrorIs(t, err, mutex.ErrInvalid)
}

func TestFindingString(t *testing.T) {
	f := redlock.Finding{Node: "127.0.0.1:6380", Severity: redlock.Unfit, Setting: "maxmemory-policy", Value: "allkeys-lru", Message: "evicts locks"}
	assert.Equal(t, "127.0.0.1:6380: maxmemory-policy=allkeys-lru: unfit: evicts locks", f.String())
	f = redlock.Finding{Node: "n", Severity: redlock.Unfit, Message: "unreachable"}
	assert.Equal(t, "n: unfit: unreachable", f.String())
	assert.Equal(t, "note", redlock.Note.String())
	assert.Equal(t, "risky", redlock.Risky.String())
	var nilReport *redlock.Report
	assert.False(t, nilReport.OK())
}

// Check before taking traffic: refuse to start on a set that can lose locks.
func ExampleRedlock_Check() {
	ctx := context.Background()
	rs, err := redlock.NewFromURLs(ctx, []string{
		"redis://redis-a.internal:6379/0",
		"redis://redis-b.internal:6379/0",
		"redis://redis-c.internal:6379/0",
	}, redlock.WithKeyPrefix("locks:"))
	if rs == nil {
		log.Fatal(err)
	}
	defer rs.Close()
	rep, err := rs.Check(ctx)
	if err != nil {
		log.Fatal(err) // ctx ended
	}
	if !rep.OK() {
		log.Fatalf("lock nodes are not ready for production:\n%s", rep)
	}
	fmt.Println(rep)
}

// A set that bears fewer nodes down than its size could gets a note on the
// node set: 1 or 2 nodes, or an even number; 3 gets none.
func TestCheckNotesTheSetsSize(t *testing.T) {
	servers := redistest.Start(t, 4, redistest.WithAOF())
	for n, want := range map[int]string{1: "one node", 2: "3 bear one down", 3: "", 4: "4 nodes need 3 for a majority and bear 1 down, as 3 would"} {
		var addrs []string
		for _, s := range servers[:n] {
			addrs = append(addrs, s.Addr())
		}
		rep := check(t, checkSet(t, addrs, "", ""))
		f := findings(rep, "", "nodes")
		if want == "" {
			assert.Empty(t, f, "%d nodes", n)
			assert.True(t, rep.OK())
			continue
		}
		require.Len(t, f, 1, "%d nodes", n)
		assert.Equal(t, redlock.Note, f[0].Severity)
		assert.Contains(t, f[0].Message, want)
		assert.True(t, rep.OK(), "a note does not count")
		assert.Contains(t, rep.String(), "node set: nodes="+strconv.Itoa(n)+": note: ")
	}
}
