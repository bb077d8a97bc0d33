package redlock_test

import (
	"context"
	"fmt"
	"slices"
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

// Check inspects every primary of a Cluster node and names the shard in each
// finding: an evicting policy on one shard, a shard down, the shards of a
// Cluster listed twice, and no persistence on every shard.
func TestCheckClusterNodes(t *testing.T) {
	clusters := redistest.StartClusters(t, 2, 3, 0)
	fast := func(o *redis.ClusterOptions) {
		o.MaxRetries, o.DialerRetries, o.DialTimeout, o.ReadTimeout = -1, 1, time.Second, time.Second
	}
	clients := redistest.ClusterClients(t, clusters, fast)
	again := clusters[0].Client(t, fast, func(o *redis.ClusterOptions) { // New refuses a seed given twice
		o.Addrs = []string{fmt.Sprintf("localhost:%d", clusters[0].Primaries[1].Port())}
	})
	clients = append(clients, again) // the first Cluster again, seeded under another name
	rs, err := redlock.New(clients)
	require.NoError(t, err)
	nodes := rs.Nodes()

	evicting := clusters[0].Primaries[1]
	evicting.Do(t, "CONFIG", "SET", "maxmemory", "100mb")
	evicting.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	shard := func(s *redistest.Server, slots string) string { return fmt.Sprintf("%s (slots %s)", s.Addr(), slots) }

	rep := check(t, rs)
	policy := findings(rep, nodes[0], "maxmemory-policy")
	require.Len(t, policy, 1, "one shard evicts")
	assert.Equal(t, redlock.Unfit, policy[0].Severity)
	assert.Equal(t, shard(evicting, "5461-10921"), policy[0].Shard)
	assert.Contains(t, policy[0].String(), nodes[0]+" shard "+evicting.Addr()+" (slots 5461-10921): maxmemory-policy=allkeys-lru: unfit")
	for i, c := range clusters {
		persistence := findings(rep, nodes[i], "appendonly")
		require.Len(t, persistence, 3, "every shard of node %d has no persistence", i)
		var shards []string
		for _, f := range persistence {
			shards = append(shards, f.Shard)
		}
		assert.ElementsMatch(t, []string{shard(c.Primaries[0], "0-5460"), shard(c.Primaries[1], "5461-10921"), shard(c.Primaries[2], "10922-16383")}, shards)
		assert.True(t, rep.Nodes[i].Checked && rep.Nodes[i].Reachable)
		assert.Positive(t, rep.Nodes[i].RTT)
		assert.True(t, strings.HasPrefix(rep.Nodes[i].Version, "7."), rep.Nodes[i].Version)
	}
	twice := findings(rep, nodes[2], "run_id")
	require.Len(t, twice, 3, "each shard of the Cluster listed twice is reported")
	for _, f := range twice {
		assert.Equal(t, redlock.Unfit, f.Severity)
		assert.Contains(t, f.Message, "the same redis-server as "+nodes[0]+" shard "+f.Shard)
	}
	assert.Empty(t, findings(rep, nodes[0], "run_id"), "the first listing is not a duplicate")
	assert.Empty(t, findings(rep, nodes[0], "redis_mode"), "a Cluster given as a ClusterClient is right")
	assert.False(t, rep.OK())

	down := clusters[1].Primaries[2]
	down.Kill()
	rep = check(t, rs)
	var unreachable []redlock.Finding
	for _, f := range findings(rep, nodes[1], "") {
		if f.Shard == shard(down, "10922-16383") {
			unreachable = append(unreachable, f)
		}
	}
	require.Len(t, unreachable, 1, "the killed shard is named")
	assert.Contains(t, unreachable[0].Message, "unreachable")
	assert.False(t, rep.Nodes[1].Reachable)
}

// A Check whose ctx ends while a shard primary hangs returns at once and
// still names that shard, with the findings of the shards that answered
// (review 20: `doctor --timeout 2s` said only "not checked: the context
// ended first" of the whole Cluster).
func TestCheckClusterWithAHungShardWhenCtxEnds(t *testing.T) {
	clusters := redistest.StartClusters(t, 1, 3, 0)
	p := clusters[0].Primaries
	rs, err := redlock.NewFromURLs(t.Context(), []string{"redis+cluster://" + p[0].Addr() + "?addr=" + p[1].Addr() + "&addr=" + p[2].Addr()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	hung := clusters[0].Primaries[1]
	hung.Pause()
	t.Cleanup(hung.Resume)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := rs.Check(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second, "returned when ctx ended, not at the client's read timeout")
	node := rs.Nodes()[0]
	assert.False(t, rep.Nodes[0].Checked)
	assert.False(t, rep.Nodes[0].Reachable)
	var named bool
	for _, f := range findings(rep, node, "") {
		if strings.Contains(f.Message, "primary "+hung.Addr()+" (slots 5461-10921) was not checked (it did not answer before the context ended)") {
			named = true
		}
	}
	assert.True(t, named, "the hung shard is named: %v", rep)
	persistence := findings(rep, node, "appendonly")
	require.Len(t, persistence, 2, "the shards that answered are reported: %v", rep)
	assert.Contains(t, rep.String(), node+": not checked: the context ended first")
}

// The minimal ACL user of docs/operations.md works on Cluster nodes with
// what that page adds for them (~{<prefix>* beside ~<prefix>*, and
// +cluster|slots), in a set that mixes a Cluster and plain nodes: every
// primitive, names of every shard, and a Check without an unfit finding.
// Without +cluster|slots only the names of the seed's shard locked (MOVED),
// and Check blamed an unreachable Cluster (doctor's 69) where the user's
// rules were the cause (review 33): it now says so, as an "acl" finding.
func TestMinimalACLUserOnClusterNodes(t *testing.T) {
	cluster := redistest.StartClusters(t, 1, 3, 0)[0]
	plain := redistest.Start(t, 2)
	rules := strings.Replace(MinimalACL, "~*", "~locks:* ~{locks:*", 1) + " +cluster|slots +command"
	for _, s := range append(slices.Clone(cluster.Primaries), plain...) {
		setUser(t, s, "locker", rules)
		setUser(t, s, "noslots", strings.Replace(rules, "+cluster|slots", "", 1))
	}
	urls := func(user string) []string {
		p := cluster.Primaries
		return append([]string{"redis+cluster://" + user + ":locker-pw@" + p[0].Addr() + "?addr=" + p[1].Addr() + "&addr=" + p[2].Addr()},
			urlsOf(plain, user+":locker-pw@")...)
	}
	rs, err := redlock.NewFromURLs(t.Context(), urls("locker"), redlock.WithKeyPrefix("locks:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	lockCycle(t, rs, mutex.WithTTL(time.Second))
	everyPrimitive(t, rs, mutex.WithTTL(time.Second))
	for i := range 12 { // names on every shard
		m := rs.NewMutex(fmt.Sprint("acl:", i))
		require.NoError(t, m.TryLockContext(t.Context()), "%s, on shard %d", m.Name(), cluster.Shard("locks:"+m.Name()))
		require.NoError(t, m.UnlockContext(t.Context()))
	}
	for _, f := range check(t, rs).Findings {
		assert.NotEqual(t, redlock.Unfit, f.Severity, "%v", f)
	}

	noslots, err := redlock.NewFromURLs(t.Context(), urls("noslots"), redlock.WithKeyPrefix("locks:"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = noslots.Close() })
	f := findings(check(t, noslots), noslots.Nodes()[0], "acl")
	require.Len(t, f, 1)
	assert.Equal(t, redlock.Unfit, f[0].Severity)
	assert.Contains(t, f[0].Message, "+cluster|slots")

	// A wrong password is the user's too, not a Cluster that did not answer
	// (review 36: doctor exited 69, "wait", where waiting cannot help).
	p := cluster.Primaries
	wrong, err := redlock.NewFromURLs(t.Context(), []string{"redis+cluster://locker:wrong@" + p[0].Addr() + "?addr=" + p[1].Addr()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = wrong.Close() })
	f = findings(check(t, wrong), wrong.Nodes()[0], "acl")
	require.Len(t, f, 1)
	assert.Contains(t, f[0].Message, "WRONGPASS")
}

// setUser gives server s the ACL user with rules (its password locker-pw).
func setUser(t *testing.T, s *redistest.Server, user, rules string) {
	args := []any{"ACL", "SETUSER", user}
	for _, rule := range strings.Fields(rules) {
		args = append(args, rule)
	}
	require.Equal(t, "OK", s.Do(t, args...))
}
