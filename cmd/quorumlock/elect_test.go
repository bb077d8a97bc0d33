package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
)

// tokenOf returns the fencing token a holding helper printed.
func tokenOf(t *testing.T, line string) uint64 {
	t.Helper()
	fields := strings.Fields(line)
	token, err := strconv.ParseUint(fields[len(fields)-1], 10, 64)
	require.NoError(t, err, line)
	return token
}

// Two elects on one name: the first runs CMD while leading, with the
// leadership's fencing token; leader shows its value and token; the second
// waits, and leads with a larger token once the first's CMD exits (it
// resigns). CMD's status is elect's.
func TestElectRunsCMDWhileLeading(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	a := start(t, env, append([]string{"elect", "sched", "host-a", "--"}, helperCmd("hold", "-exit", "3")...)...)
	first := tokenOf(t, a.expect("holding sched"))
	code, out, stderr := run(t, env, "leader", "sched")
	require.Equal(t, 0, code, "stderr %q", stderr)
	assert.Equal(t, strconv.FormatUint(first, 10)+" host-a", out)

	b := start(t, env, append([]string{"elect", "sched", "host b", "--"}, helperCmd("hold")...)...)
	waitQueued(t, servers, "sched")
	code, out, stderr = run(t, env, append([]string{"elect", "--no-wait", "sched", "host-c", "--"}, helperCmd("env", "0")...)...)
	assert.Equal(t, exitHeld, code, "another candidate leads; stderr %q", stderr)
	assert.Contains(t, stderr, `another candidate leads the election on "sched"`)
	assert.Empty(t, out, "CMD did not run")

	a.tell()
	require.Equal(t, 3, a.wait(), "CMD's own status; stderr %q", a.stderr.String())
	second := tokenOf(t, b.expect("holding sched"))
	assert.Greater(t, second, first)
	code, out, _ = run(t, env, "leader", "sched")
	require.Equal(t, 0, code)
	assert.Equal(t, strconv.FormatUint(second, 10)+" host b", out)
	b.tell()
	require.Equal(t, 0, b.wait())
	code, _, stderr = run(t, env, "leader", "sched")
	assert.Equal(t, exitHeld, code, "nobody leads once b resigned")
	assert.Contains(t, stderr, "nobody leads")
}

// leader --watch prints the current leader, then every change, from another
// process than the candidates.
func TestLeaderWatchPrintsEveryChange(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	w := start(t, env, "leader", "--watch", "sched:w")
	w.expect("0")
	e := library(t, servers).NewElection("sched:w", mutex.WithTTL(2*time.Second))
	require.NoError(t, e.Campaign(t.Context(), "one"))
	token := strconv.FormatUint(e.FencingToken(), 10)
	w.expect(token + " one")
	require.NoError(t, e.Proclaim(t.Context(), "two words"))
	w.expect(token + " two words")
	require.NoError(t, e.Resign(t.Context()))
	assert.Equal(t, "0", w.expect("0"))
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(), "stderr %q", w.stderr.String())
}

// leader --watch says on stderr when too few nodes answer to tell who
// leads (its stdout, from Observe, stays silent), and when they answer again.
func TestLeaderWatchSaysWhenTheNodesCannotTell(t *testing.T) {
	servers := redistest.Start(t, 3)
	w := start(t, nodesEnv(servers), "leader", "--watch", "sched:dark")
	w.expect("0")
	for _, s := range servers[1:] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	require.Eventually(t, func() bool { return strings.Contains(w.stderr.String(), "who leads is unknown") }, waitFor, 10*time.Millisecond)
	for _, s := range servers[1:] {
		s.Resume()
	}
	require.Eventually(t, func() bool { return strings.Contains(w.stderr.String(), "the nodes answer again") }, waitFor, 10*time.Millisecond)
	w.signal(syscall.SIGTERM)
	require.Equal(t, 0, w.wait(), "stderr %q", w.stderr.String())
}

func TestElectAndLeaderExitStatuses(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	cmd := helperCmd("env", "0")
	for what, args := range map[string][]string{
		"elect without VALUE":       append([]string{"elect", "sched:u", "--"}, cmd...),
		"elect without CMD":         {"elect", "sched:u", "v"},
		"elect with two lines":      append([]string{"elect", "sched:u", "a\nb", "--"}, cmd...),
		"elect with an empty VALUE": append([]string{"elect", "sched:u", "", "--"}, cmd...),
		"elect, nothing after":      {"elect", "sched:u", "v", "--"},
		"elect with a bad TTL":      append([]string{"elect", "--ttl", "5ms", "sched:u", "v", "--"}, cmd...),
		"elect of a bad name":       append([]string{"elect", "sched:quorumlock:q", "v", "--"}, cmd...),
		"leader without a name":     {"leader"},
		"leader of a bad name":      {"leader", "quorumlock:fence"},
		"watch of a bad name":       {"leader", "--watch", "quorumlock:fence"},
	} {
		code, out, stderr := run(t, env, args...)
		assert.Equal(t, exitUsage, code, "%s: stderr %q", what, stderr)
		assert.NotContains(t, out, "name sched:u", "%s: CMD did not run", what)
	}
	servers[0].Kill()
	servers[1].Kill()
	for what, args := range map[string][]string{
		"elect":  append([]string{"elect", "--wait", "500ms", "sched:u", "v", "--"}, cmd...),
		"leader": {"leader", "--timeout", "2s", "sched:u"},
		"watch":  {"leader", "--watch", "--timeout", "2s", "sched:u"},
	} {
		code, out, stderr := run(t, env, args...)
		assert.Equal(t, exitUnavailable, code, "%s: stderr %q", what, stderr)
		assert.Empty(t, out, what)
	}
}

// A candidate that waits while too few nodes answer says so on stderr
// (review 16: it printed nothing until interrupted), as leader --watch does.
func TestElectSaysWhenTheNodesCannotTell(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, s := range servers[:2] {
		s.Kill()
	}
	p := start(t, nodesEnv(servers), "elect", "job:unreachable", "host-a", "--", "true")
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "who leads is unknown, waiting to lead: ")
	}, waitFor, 50*time.Millisecond, "stderr %q", p.stderr.String())
	p.signal(syscall.SIGINT)
	require.Equal(t, exitSignal+int(syscall.SIGINT), p.wait())
}
