package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
)

func TestInspectAndForceUnlock(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	m := library(t, servers).NewMutex("ops:stuck", mutex.WithTTL(1500*time.Millisecond), mutex.WithAutoExtend())
	require.NoError(t, m.LockContext(t.Context()))

	code, out, stderr := run(t, env, "inspect", "ops:stuck")
	require.Equal(t, 0, code, "stderr %q", stderr)
	assert.Contains(t, out, "ops:stuck (mutex): held by "+m.Value()+" on a majority")
	for _, s := range servers {
		assert.Contains(t, out, s.Addr()+": "+m.Value())
	}

	code, _, stderr = run(t, env, "unlock", "ops:stuck")
	require.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "add --force")
	select {
	case <-m.Lost():
		require.FailNow(t, "unlock without --force took the lock away")
	default:
	}

	code, out, stderr = run(t, env, "unlock", "--force", "ops:stuck")
	require.Equal(t, 0, code, "stderr %q", stderr)
	assert.Contains(t, out, "removed ops:stuck")
	select {
	case <-m.Lost():
	case <-time.After(waitFor):
		require.FailNow(t, "the evicted holder was not told at its next renewal")
	}
	require.ErrorIs(t, m.LostCause(), mutex.ErrNotHeld)

	// A renewal in flight may have put the evicted token back on a node
	// that was not yet a holder, until its TTL: never on a majority.
	code, out, _ = run(t, env, "inspect", "ops:stuck")
	require.Equal(t, 0, code)
	assert.NotContains(t, out, "held by "+m.Value())
}

// --key-prefix "" means no prefix, also where QUORUMLOCK_KEY_PREFIX is set
// (review 12: the variable won, and a held lock was shown free).
func TestEmptyKeyPrefixOverridesTheVariable(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := append(nodesEnv(servers), "QUORUMLOCK_KEY_PREFIX=app:")
	m := library(t, servers).NewMutex("ops:unprefixed", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	code, out, stderr := run(t, env, "--key-prefix", "", "inspect", "ops:unprefixed")
	require.Equal(t, 0, code, "stderr %q", stderr)
	assert.Contains(t, out, "held by "+m.Value())
	_, out, _ = run(t, env, "inspect", "ops:unprefixed")
	assert.NotContains(t, out, "held by "+m.Value(), "the variable's prefix, without the flag")
}

// --timeout bounds an operator's call whole, with a majority hung: the
// closing of the connections included (review 12: it waited one more
// per-node timeout, 200ms, for the hung nodes; 300ms took about 510ms).
func TestTimeoutBoundsAnAdminCallWithAHungMajority(t *testing.T) {
	env := nodesEnv(hungMajority(t))
	for _, args := range [][]string{{"inspect", "ops:hung"}, {"unlock", "--force", "ops:hung"}, {"leader", "ops:hung"}} {
		began := time.Now()
		code, _, stderr := run(t, env, append([]string{"--timeout", "300ms"}, args...)...)
		took := time.Since(began)
		assert.Equal(t, exitUnavailable, code, "%v: stderr %q", args, stderr)
		assert.Less(t, took, 460*time.Millisecond, "%v: the process took %v with --timeout 300ms", args, took)
	}
}

// With a minority hung, a short --timeout is enough for inspect: the
// connection's ping (at most the per-node timeout, 200ms, for the hung
// nodes) takes half of it at most (review 16: 69, "nothing sent: context
// deadline exceeded", for every --timeout under 200ms).
func TestShortTimeoutWithAHungMinority(t *testing.T) {
	servers := redistest.Start(t, 5)
	for _, s := range servers[:2] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	env := nodesEnv(servers)
	code, out, stderr := run(t, env, "--timeout", "100ms", "inspect", "ops:minority")
	assert.Equal(t, 0, code, "a majority answers; stderr %q", stderr)
	assert.Contains(t, out, servers[0].Addr()+": failed", "the hung nodes are named")
}

// A run's lock, or an elect's leadership, forced open: CMD is stopped, 70.
func TestRunIsStoppedByForceUnlock(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	for _, args := range [][]string{{"run", "--ttl", "1500ms", "ops:job"}, {"elect", "--ttl", "1500ms", "ops:job", "leader-a"}} {
		p := start(t, env, append(append(args, "--"), helperCmd("hold")...)...)
		p.expect("holding ops:job")
		code, _, stderr := run(t, env, "unlock", "--force", "ops:job")
		require.Equal(t, 0, code, "stderr %q", stderr)
		p.expect("signal terminated")
		require.Equal(t, exitLost, p.wait(), "%s: stderr %q", args[0], p.stderr.String())
	}
}

func TestAdminWithNodesDown(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	servers[2].Kill()
	code, out, stderr := run(t, env, "inspect", "ops:down")
	require.Equal(t, 0, code, "a majority answered; stderr %q", stderr)
	assert.Contains(t, out, servers[2].Addr()+": failed")
	code, _, stderr = run(t, env, "unlock", "--force", "ops:down")
	require.Equal(t, 0, code, "stderr %q", stderr)

	servers[1].Kill()
	code, out, stderr = run(t, env, "inspect", "ops:down")
	assert.Equal(t, exitUnavailable, code, "stderr %q", stderr)
	assert.Contains(t, out, servers[1].Addr()+": failed", "what was seen is printed")
	code, _, stderr = run(t, env, "unlock", "--force", "ops:down")
	assert.Equal(t, exitUnavailable, code)
	assert.Contains(t, stderr, "nothing removed")
}

func TestDoctor(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	code, out, stderr := run(t, env, "doctor")
	require.Equal(t, 0, code, "stdout %q, stderr %q", out, stderr)
	assert.NotEmpty(t, out)

	servers[1].Do(t, "CONFIG", "SET", "maxmemory", "100mb")
	servers[1].Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	code, out, stderr = run(t, env, "doctor")
	assert.Equal(t, exitUnfit, code)
	assert.Contains(t, out, servers[1].Addr()+": maxmemory-policy=allkeys-lru: unfit")
	assert.Contains(t, stderr, "unfit for locks")

	// A node that does not answer is unavailable (69), as in every other
	// subcommand: a paused one, and a stopped one.
	servers[1].Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	paused := []string{"QUORUMLOCK_NODES=redis://" + servers[0].Addr() + ",redis://" + servers[1].Addr() +
		",redis://" + servers[2].Addr() + "?read_timeout=300ms"} // its PING fails before --timeout
	servers[2].Pause()
	code, out, stderr = run(t, paused, "doctor")
	servers[2].Resume()
	assert.Equal(t, exitUnavailable, code, "a paused node is unavailable; stdout %q, stderr %q", out, stderr)
	assert.Contains(t, out, servers[2].Addr()+"?read_timeout=300ms: unfit: unreachable")
	assert.Contains(t, stderr, "did not answer")
	servers[2].Kill()
	code, out, stderr = run(t, env, "doctor")
	assert.Equal(t, exitUnavailable, code, "a stopped node is unavailable; stderr %q", stderr)
	assert.Contains(t, out, servers[2].Addr()+": unfit: unreachable")
	assert.Contains(t, stderr, servers[2].Addr()+" did not answer")

	// A node unfit as it is set up is 78 whatever the others did.
	servers[1].Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	code, _, stderr = run(t, env, "doctor")
	assert.Equal(t, exitUnfit, code, "stderr %q", stderr)
	assert.Contains(t, stderr, servers[1].Addr()+" is unfit for locks")
}

// The command on Cluster nodes (redis+cluster:// URLs), one set of
// Clusters for every case: run (fencing tokens increasing), inspect and
// unlock --force (CMD stopped), elect and leader, and doctor, which names
// the shard.
func TestCommandOnClusterNodes(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 3, 0, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	var urls []string
	for _, c := range clusters {
		a := c.Addrs()
		urls = append(urls, "redis+cluster://"+a[0]+"?addr="+a[1]+"&addr="+a[2])
	}
	env := []string{"QUORUMLOCK_NODES=" + strings.Join(urls, ",")}
	// onShards reports on how many Clusters key exists, on its shard.
	onShards := func(key string) int {
		n := 0
		for _, c := range clusters {
			n += int(c.Primaries[c.Shard(key)].Do(t, "EXISTS", key).(int64))
		}
		return n
	}

	t.Run("run", func(t *testing.T) {
		var tokens []uint64
		for range 2 {
			code, out, stderr := run(t, env, append([]string{"run", "job:env", "--"}, helperCmd("env", "7")...)...)
			require.Equal(t, 7, code, "CMD's own exit status; stderr %q", stderr)
			_, token, ok := strings.Cut(out, "token ")
			require.True(t, ok, out)
			n, err := strconv.ParseUint(token, 10, 64)
			require.NoError(t, err)
			tokens = append(tokens, n)
			assert.Zero(t, onShards("job:env"), "released on every Cluster")
		}
		assert.Greater(t, tokens[1], tokens[0], "fencing tokens increase from one run to the next")
	})
	t.Run("inspect and unlock --force", func(t *testing.T) {
		p := start(t, env, append([]string{"run", "--ttl", "1500ms", "ops:job", "--"}, helperCmd("hold")...)...)
		p.expect("holding ops:job")
		assert.Equal(t, 3, onShards("ops:job"))
		code, out, stderr := run(t, env, "inspect", "ops:job")
		require.Equal(t, 0, code, "stderr %q", stderr)
		assert.Contains(t, out, "ops:job (mutex): held by ")
		assert.Contains(t, out, "on a majority")
		code, out, stderr = run(t, env, "unlock", "--force", "ops:job")
		require.Equal(t, 0, code, "stderr %q", stderr)
		assert.Contains(t, out, "removed ops:job")
		p.expect("signal terminated")
		require.Equal(t, exitLost, p.wait(), "stderr %q", p.stderr.String())
	})
	t.Run("inspect and unlock --force find the permits", func(t *testing.T) {
		p := start(t, env, append([]string{"run", "--limit", "2", "--ttl", "1500ms", "exports", "--"}, helperCmd("hold")...)...)
		p.expect("holding exports")
		code, out, stderr := run(t, env, "inspect", "exports")
		require.Equal(t, 0, code, "stderr %q", stderr)
		assert.Contains(t, out, "(permit): held by ")
		assert.NotContains(t, out, "free")
		code, out, stderr = run(t, env, "unlock", "--force", "exports")
		require.Equal(t, 0, code, "stderr %q", stderr)
		assert.Contains(t, out, "removed ")
		p.expect("signal terminated")
		require.Equal(t, exitLost, p.wait(), "stderr %q", p.stderr.String())
	})
	t.Run("elect and leader", func(t *testing.T) {
		a := start(t, env, append([]string{"elect", "sched", "host-a", "--"}, helperCmd("hold")...)...)
		first := tokenOf(t, a.expect("holding sched"))
		code, out, stderr := run(t, env, "leader", "sched")
		require.Equal(t, 0, code, "stderr %q", stderr)
		assert.Equal(t, strconv.FormatUint(first, 10)+" host-a", out)
		a.tell()
		require.Equal(t, 0, a.wait(), "stderr %q", a.stderr.String())
		code, _, stderr = run(t, env, "leader", "sched")
		assert.Equal(t, exitHeld, code, "nobody leads once a resigned")
		assert.Contains(t, stderr, "nobody leads")
	})
	t.Run("a Cluster listed twice is refused", func(t *testing.T) {
		again := fmt.Sprintf("redis+cluster://localhost:%d", clusters[0].Primaries[1].Port()) // the first Cluster, another seed name
		twice := []string{"QUORUMLOCK_NODES=" + strings.Join([]string{urls[0], urls[1], again}, ",")}
		for _, args := range [][]string{append([]string{"run", "--no-wait", "twice", "--"}, helperCmd("env", "0")...), {"doctor"}} {
			code, out, stderr := run(t, twice, args...)
			assert.Equal(t, exitUsage, code, "%s: stdout %q", args[0], out)
			assert.Contains(t, stderr, "node 0 ("+urls[0]+") and node 2 ("+again+")", args[0])
		}
		assert.Zero(t, onShards("twice"), "nothing written")
	})
	t.Run("doctor names the shard", func(t *testing.T) {
		code, out, stderr := run(t, env, "doctor")
		require.Equal(t, 0, code, "stdout %q, stderr %q", out, stderr)
		evicting := clusters[1].Primaries[2]
		evicting.Do(t, "CONFIG", "SET", "maxmemory", "100mb")
		evicting.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
		code, out, stderr = run(t, env, "doctor")
		assert.Equal(t, exitUnfit, code)
		assert.Contains(t, out, urls[1]+" shard "+evicting.Addr()+" (slots 10922-16383): maxmemory-policy=allkeys-lru: unfit")
		assert.Contains(t, stderr, "shard "+evicting.Addr())
	})
}

func TestVersion(t *testing.T) {
	code, out, _ := run(t, nil, "version")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "quorumlock devel", "a build from a checkout")
	assert.Contains(t, out, "library github.com/quorumlock/quorumlock: local checkout (../..)")
	assert.NotContains(t, out, "v0.0.0-00010101000000-000000000000")
	assert.NotContains(t, out, "=>")
	assert.Contains(t, out, runtime.Version())
}

func TestVersionsFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "ca9c2c6a1b2c3d4e5f60718293a4b5c6d7e8f901"},
		{Key: "vcs.time", Value: "2026-12-02T21:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}
	lib := func(version string, replace *debug.Module) []*debug.Module {
		return []*debug.Module{{Path: "github.com/spf13/cobra", Version: "v1.10.2"}, {Path: libraryPath, Version: version, Replace: replace}}
	}
	for _, tt := range []struct {
		name             string
		bi               *debug.BuildInfo
		command, library string
	}{
		{"releases", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}, Deps: lib("v1.2.1", nil)}, "v1.2.0", "v1.2.1"},
		{"a checkout, as go.mod replaces the library", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs,
			Deps: lib("v0.0.0-00010101000000-000000000000", &debug.Module{Path: "../..", Version: "(devel)"})},
			"devel (revision ca9c2c6a1b2c, 2026-12-02T21:00:00Z, modified)", "local checkout (../..)"},
		{"a checkout without VCS information", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Deps: lib("v0.0.0-00010101000000-000000000000", &debug.Module{Path: "/src/quorumlock"})},
			"devel", "local checkout (/src/quorumlock)"},
		{"pseudo-versions", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261202210000-ca9c2c6a1b2c+dirty"},
			Deps: lib("v1.3.0-rc.1.0.20261130120000-0123456789ab", nil)},
			"devel (revision ca9c2c6a1b2c, 2026-12-02T21:00:00Z, modified)", "devel (revision 0123456789ab, 2026-11-30T12:00:00Z)"},
		{"a replace by a fork", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"},
			Deps: lib("v1.2.0", &debug.Module{Path: "example.com/fork", Version: "v1.2.5"})}, "v1.2.0", "v1.2.5 of example.com/fork"},
		{"no build information", nil, "unknown", "unknown"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			command, library := versions(tt.bi)
			assert.Equal(t, tt.command, command)
			assert.Equal(t, tt.library, library)
		})
	}
}

func TestPasswordsAreNeverPrinted(t *testing.T) {
	const password = "s3cret-pw-4ql"
	servers := redistest.Start(t, 3, redistest.WithPassword(password))
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://:" + password + "@" + s.Addr()
	}
	env := []string{"QUORUMLOCK_NODES=" + strings.Join(urls, ",")}
	wrong := []string{"QUORUMLOCK_NODES=" + strings.ReplaceAll(strings.Join(urls, ","), password, password+"-wrong")}
	servers[2].Kill()
	for _, tt := range []struct {
		env  []string
		args []string
	}{
		{env, []string{"inspect", "ops:pw"}},
		{env, []string{"doctor"}},
		{env, []string{"unlock", "--force", "ops:pw"}},
		{env, append([]string{"run", "--no-wait", "ops:pw", "--"}, helperCmd("env", "0")...)},
		{wrong, []string{"inspect", "ops:pw"}},
		{wrong, append([]string{"run", "--no-wait", "ops:pw", "--"}, helperCmd("env", "0")...)},
		{[]string{"QUORUMLOCK_NODES=redis://:" + password + "@" + servers[0].Addr() + "/notadb"}, []string{"inspect", "ops:pw"}},
	} {
		code, out, stderr := run(t, tt.env, tt.args...)
		assert.NotContains(t, out+stderr, password, "%v exited %d", tt.args, code)
		assert.NotEmpty(t, out+stderr, "%v said something", tt.args)
	}
}
