package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// requireFree fails unless the test can take the lock on name at once.
func requireFree(t *testing.T, servers []*redistest.Server, name string) {
	t.Helper()
	m := library(t, servers).NewMutex(name)
	require.NoError(t, m.TryLockContext(t.Context()), "the lock on %q is still held", name)
	require.NoError(t, m.UnlockContext(t.Context()))
}

func TestRunGivesCMDTheLockAndItsExitStatus(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	var tokens []uint64
	for range 2 {
		code, out, stderr := run(t, env, append([]string{"run", "job:env", "--"}, helperCmd("env", "7")...)...)
		require.Equal(t, 7, code, "CMD's own exit status; stderr %q", stderr)
		assert.Contains(t, out, "name job:env")
		_, token, ok := strings.Cut(out, "token ")
		require.True(t, ok, out)
		n, err := strconv.ParseUint(token, 10, 64)
		require.NoError(t, err)
		tokens = append(tokens, n)
		requireFree(t, servers, "job:env")
	}
	assert.Greater(t, tokens[1], tokens[0], "fencing tokens increase from one run to the next")
}

func TestRunsOnOneNameNeverOverlap(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	dir := t.TempDir()
	const runs, work = 4, 150 * time.Millisecond
	procs := make([]*proc, runs)
	for i := range procs {
		procs[i] = start(t, env, append([]string{"run", "--ttl", "2s", "job:excl", "--"}, helperCmd("excl", dir, work.String())...)...)
	}
	for _, p := range procs {
		require.Equal(t, 0, p.wait(), "99: two commands held the marker at once; stdout %q, stderr %q", p.seen, p.stderr.String())
	}
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	var spans [][2]int64 // start and end of each command's work, in ns
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var span [2]int64
		_, err := fmt.Sscan(line, &span[0], &span[1])
		require.NoError(t, err, line)
		spans = append(spans, span)
	}
	require.Len(t, spans, runs)
	slices.SortFunc(spans, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	for i := 1; i < len(spans); i++ {
		assert.Less(t, spans[i-1][1], spans[i][0], "command %d started before command %d ended", i, i-1)
	}
}

func TestRunWaitsForTheHolder(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	a := start(t, env, append([]string{"run", "job:wait", "--"}, helperCmd("hold")...)...)
	a.expect("holding job:wait")
	b := start(t, env, append([]string{"run", "--wait", "20s", "job:wait", "--"}, helperCmd("hold")...)...)
	waitQueued(t, servers, "job:wait")
	select {
	case line := <-b.lines:
		require.FailNow(t, "the second run started CMD while the first held the lock", line)
	default:
	}
	a.tell()
	require.Equal(t, 0, a.wait())
	b.expect("holding job:wait")
	b.tell()
	require.Equal(t, 0, b.wait())
	requireFree(t, servers, "job:wait")
}

// A caller killed while queued leaves its place in the nodes' queues until
// it lapses (its life, 1.3s by default; here made longer on the nodes, as a
// dead waiter's place): a --no-wait run meanwhile exits 75 and says the lock
// is taken by callers queued ahead, not held (review 20: "held by another
// owner" while inspect said free).
func TestRunBehindADeadWaitersPlace(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, s := range servers {
		s.Do(t, "ZADD", "job:dead-waiter:quorumlock:q", 1, "deadhub.deadwaiter")
		s.Do(t, "ZADD", "job:dead-waiter:quorumlock:qx", time.Now().Add(time.Minute).UnixMilli(), "deadhub.deadwaiter")
	}
	code, out, stderr := run(t, nodesEnv(servers), append([]string{"run", "--no-wait", "job:dead-waiter", "--"}, helperCmd("env", "0")...)...)
	assert.Equal(t, exitHeld, code, "stderr %q", stderr)
	assert.Empty(t, out, "CMD did not run")
	assert.Contains(t, stderr, `lock "job:dead-waiter" is taken`)
	assert.Contains(t, stderr, "other callers are ahead of this one in the nodes' queues (1 queued)")
	assert.NotContains(t, stderr, "held by another owner")
}

func TestRunHeldByAnotherOwner(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	m := library(t, servers).NewMutex("job:held", mutex.WithTTL(time.Minute))
	require.NoError(t, m.LockContext(t.Context()))
	for _, wait := range [][]string{{"--no-wait"}, {"--wait", "0"}, {"--wait", "300ms"}} {
		args := append(append([]string{"run"}, wait...), "job:held", "--")
		code, out, stderr := run(t, env, append(args, helperCmd("env", "0")...)...)
		assert.Equal(t, exitHeld, code, "%v: stderr %q", wait, stderr)
		assert.Empty(t, out, "CMD did not run")
		assert.Contains(t, stderr, "held by another owner")
	}
	// --wait 0, as flock -w 0: one attempt, which gets a free lock.
	require.NoError(t, m.UnlockContext(t.Context()))
	code, out, stderr := run(t, env, append([]string{"run", "--wait", "0", "job:held", "--"}, helperCmd("env", "0")...)...)
	assert.Equal(t, 0, code, "stderr %q", stderr)
	assert.Contains(t, out, "name job:held")
}

func TestRunLimitLetsThatManyRun(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	holder := func(extra ...string) *proc {
		args := append(append([]string{"run", "--limit", "2"}, extra...), "job:limit", "--")
		return start(t, env, append(args, helperCmd("hold")...)...)
	}
	a, b := holder(), holder()
	a.expect("holding job:limit")
	b.expect("holding job:limit") // two at once
	code, out, stderr := run(t, env, append([]string{"run", "--limit", "2", "--no-wait", "job:limit", "--"}, helperCmd("env", "0")...)...)
	assert.Equal(t, exitHeld, code, "a third is refused; stderr %q", stderr)
	assert.Empty(t, out)
	c := holder("--wait", "20s")
	a.tell()
	require.Equal(t, 0, a.wait())
	c.expect("holding job:limit") // the permit a gave back
	b.tell()
	c.tell()
	require.Equal(t, 0, b.wait())
	require.Equal(t, 0, c.wait())
}

// Runs on one name with different --limit values would admit the larger
// number: the nodes keep the limit while permits live (and up to a TTL
// after), and a run asking for another is a usage error (64) that runs
// nothing, waiting or not.
func TestRunLimitMismatchIsUsage(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	a := start(t, env, append([]string{"run", "--limit", "3", "job:mismatch", "--"}, helperCmd("hold")...)...)
	a.expect("holding job:mismatch")
	for _, wait := range [][]string{{"--no-wait"}, {"--wait", "5s"}} {
		args := append(append([]string{"run", "--limit", "4"}, wait...), "job:mismatch", "--")
		code, out, stderr := run(t, env, append(args, helperCmd("env", "0")...)...)
		assert.Equal(t, exitUsage, code, "%v: stderr %q", wait, stderr)
		assert.Contains(t, stderr, "limit 3 on the nodes", wait)
		assert.NotContains(t, stderr, "quorumlock help", "%v: not a command-line syntax error", wait)
		assert.Empty(t, out, "%v: CMD must not run", wait)
	}
	a.tell()
	require.Equal(t, 0, a.wait())
}

// A lock, or a leadership, lost to a majority of nodes gone: CMD is stopped,
// 70, and the cause names the nodes, not another owner.
func TestRunStopsCMDWhenTheLockIsLost(t *testing.T) {
	for _, tt := range []struct {
		name, term, killAfter string
		cmd                   []string
	}{
		{"CMD ignores SIGTERM: SIGKILL after --kill-after", "ignore", "300ms", []string{"run"}},
		{"CMD ends at SIGTERM: no wait for --kill-after", "exit", "1m", []string{"run"}},
		{"elect", "exit", "1m", []string{"elect"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			args := append(tt.cmd, "--ttl", "1s", "--kill-after", tt.killAfter, "job:lost")
			if tt.cmd[0] == "elect" {
				args = append(args, "host-a")
			}
			p := start(t, nodesEnv(servers), append(append(args, "--"),
				helperCmd("hold", "-term", tt.term, "-child")...)...)
			p.expect("holding job:lost")
			child, err := strconv.Atoi(strings.TrimPrefix(p.expect("child "), "child "))
			require.NoError(t, err)
			servers[0].Kill()
			servers[1].Kill()
			p.expect("signal terminated")
			require.Equal(t, exitLost, p.wait(), "stderr %q", p.stderr.String())
			what := map[string]string{"run": "lock", "elect": "leadership"}[tt.cmd[0]]
			assert.Contains(t, p.stderr.String(), what+` "job:lost" lost while CMD ran`)
			assert.Contains(t, p.stderr.String(), mutex.ErrNodesUnavailable.Error())
			assert.True(t, gone(t, child), "CMD's child, in its process group, was stopped too")
		})
	}
}

// gone waits until process pid has ended (a zombie counts as ended).
func gone(t *testing.T, pid int) bool {
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if syscall.Kill(pid, 0) != nil || (err == nil && strings.Contains(string(stat), ") Z ")) {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

func TestRunForwardsSignals(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP} {
		p := start(t, env, append([]string{"run", "job:signal", "--"}, helperCmd("hold", "-exit", "3")...)...)
		p.expect("holding job:signal")
		p.signal(sig)
		p.expect("signal " + sig.String())
		require.Equal(t, 3, p.wait(), "CMD's own status after the forwarded %v; stderr %q", sig, p.stderr.String())
		requireFree(t, servers, "job:signal")
	}
}

func TestRunSignalBeforeTheLockLeavesCMDUnrun(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM} {
		name := "job:early-" + strconv.Itoa(int(sig))
		m := library(t, servers).NewMutex(name, mutex.WithTTL(time.Minute))
		require.NoError(t, m.LockContext(t.Context()))
		p := start(t, nodesEnv(servers), append([]string{"run", "--wait", "20s", name, "--"}, helperCmd("env", "0")...)...)
		waitQueued(t, servers, name)
		p.signal(sig)
		require.Equal(t, exitSignal+int(sig), p.wait(), "%v; stderr %q", sig, p.stderr.String())
		assert.Empty(t, p.seen, "CMD did not run")
	}
}

func TestRunNodesUnavailable(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	servers[0].Kill()
	servers[1].Kill()
	for _, wait := range [][]string{{"--no-wait"}, {"--wait", "500ms"}} {
		args := append(append([]string{"run"}, wait...), "job:down", "--")
		code, out, stderr := run(t, env, append(args, helperCmd("env", "0")...)...)
		assert.Equal(t, exitUnavailable, code, "%v: stderr %q", wait, stderr)
		assert.Empty(t, out)
		assert.Contains(t, stderr, "too few nodes answered")
	}
}

// A --wait shorter than a per-node timeout, with a majority hung: the wait
// runs out before any node answers or is judged failed, and that is the
// nodes' silence (69), not a holder (75), for run and for elect (review 12:
// a free lock was reported held).
func TestRunShortWaitWithAHungMajorityIsUnavailable(t *testing.T) {
	env := nodesEnv(hungMajority(t))
	for _, args := range [][]string{{"run", "--wait", "100ms", "job:hung", "--"}, {"run", "--limit", "2", "--wait", "100ms", "job:hung", "--"}, {"elect", "--wait", "100ms", "job:hung", "host-a", "--"}} {
		code, out, stderr := run(t, env, append(args, helperCmd("env", "0")...)...)
		assert.Equal(t, exitUnavailable, code, "%v: stderr %q", args, stderr)
		assert.Empty(t, out, "CMD did not run")
		assert.NotContains(t, stderr, "held by another owner")
		assert.NotContains(t, stderr, "is taken")
		assert.NotContains(t, stderr, "another candidate leads")
	}
}

func TestRunCommandThatCannotRun(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	notExec := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600))
	for _, tt := range []struct {
		cmd  string
		want int
	}{{filepath.Join(t.TempDir(), "missing"), exitNotFound}, {"no-such-command-quorumlock", exitNotFound}, {notExec, exitCannotRun}} {
		code, _, stderr := run(t, env, "run", "job:norun", "--", tt.cmd)
		assert.Equal(t, tt.want, code, "%s: stderr %q", tt.cmd, stderr)
		assert.Contains(t, stderr, "cannot run")
		requireFree(t, servers, "job:norun")
	}
}

func TestUsageErrors(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	cmd := helperCmd("env", "0")
	for _, tt := range []struct {
		name string
		env  []string
		args []string
	}{
		{"no arguments to run", env, []string{"run"}},
		{"no CMD", env, []string{"run", "job:usage"}},
		{"-- before NAME", env, append([]string{"run", "--"}, cmd...)},
		{"nothing after --", env, []string{"run", "job:usage", "--"}},
		{"unknown flag", env, append([]string{"run", "--bogus", "job:usage", "--"}, cmd...)},
		{"bad TTL", env, append([]string{"run", "--ttl", "soon", "job:usage", "--"}, cmd...)},
		{"zero TTL", env, append([]string{"run", "--ttl", "0s", "job:usage", "--"}, cmd...)},
		{"negative wait", env, append([]string{"run", "--wait", "-1s", "job:usage", "--"}, cmd...)},
		{"TTL below the minimum", env, append([]string{"run", "--ttl", "4ms", "job:usage", "--"}, cmd...)},
		{"zero limit given", env, append([]string{"run", "--limit", "0", "job:usage", "--"}, cmd...)},
		{"wait and no-wait", env, append([]string{"run", "--wait", "1s", "--no-wait", "job:usage", "--"}, cmd...)},
		{"negative limit", env, append([]string{"run", "--limit", "-1", "job:usage", "--"}, cmd...)},
		{"negative kill-after", env, append([]string{"run", "--kill-after", "-1s", "job:usage", "--"}, cmd...)},
		{"wait shorter than a round trip", env, append([]string{"run", "--wait", "1ns", "job:usage", "--"}, cmd...)},
		{"wait just under the minimum", env, append([]string{"run", "--wait", "9ms", "job:usage", "--"}, cmd...)},
		{"elect with a negative wait", env, append([]string{"elect", "--wait", "-1ns", "job:usage", "v", "--"}, cmd...)},
		{"elect with a wait shorter than a round trip", env, append([]string{"elect", "--wait", "5ms", "job:usage", "v", "--"}, cmd...)},
		{"zero timeout, inspect", env, []string{"--timeout", "0", "inspect", "job:usage"}},
		{"negative timeout, inspect", env, []string{"--timeout", "-1s", "inspect", "job:usage"}},
		{"zero timeout, doctor", env, []string{"--timeout", "0", "doctor"}},
		{"zero timeout, unlock", env, []string{"--timeout", "0", "unlock", "--force", "job:usage"}},
		{"timeout of 1ns, leader", env, []string{"--timeout", "1ns", "leader", "job:usage"}},
		{"timeout just under the minimum, leader --watch", env, []string{"leader", "--watch", "--timeout", "9ms", "job:usage"}},
		{"zero timeout, run", env, append([]string{"--timeout", "0", "run", "job:usage", "--"}, cmd...)},
		{"reserved name", env, append([]string{"run", "job:quorumlock:q", "--"}, cmd...)},
		{"no nodes", []string{"QUORUMLOCK_NODES="}, append([]string{"run", "job:usage", "--"}, cmd...)},
		{"an empty --nodes beside QUORUMLOCK_NODES (review 20)", env, append([]string{"--nodes", "", "run", "job:usage", "--"}, cmd...)},
		{"bad node URL", []string{"QUORUMLOCK_NODES=http://x"}, append([]string{"run", "job:usage", "--"}, cmd...)},
		{"an empty entry among the nodes", []string{"QUORUMLOCK_NODES=redis://127.0.0.1:1,,redis://127.0.0.1:2"}, []string{"inspect", "job:usage"}},
		{"no TCP port", []string{"QUORUMLOCK_NODES=redis://127.0.0.1:99999"}, []string{"inspect", "job:usage"}},
		{"unknown command", env, []string{"lock", "job:usage"}},
		{"unlock without --force", env, []string{"unlock", "job:usage"}},
		{"inspect without a name", env, []string{"inspect"}},
		{"inspect of a reserved name", env, []string{"inspect", "quorumlock:fence"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := run(t, tt.env, tt.args...)
			assert.Equal(t, exitUsage, code, "stderr %q", stderr)
			assert.NotContains(t, out, "name job:usage", "CMD did not run")
			assert.Contains(t, stderr, "quorumlock: ")
		})
	}
	code, _, stderr := run(t, env, "run", "--bogus", "job:usage", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "Run 'quorumlock help' for usage.", "a command-line syntax error")
	for flag, want := range map[string]string{
		"--ttl=4ms": "--ttl 4ms: give at least 100ms", "--limit=0": "--limit 0: give at least 1 permit, or leave --limit out for a plain lock",
		"--wait=1ms": "--wait 1ms: give 0 (one attempt, as --no-wait) or at least 10ms", "--timeout=0": "--timeout 0s: give at least 10ms",
	} {
		code, _, stderr := run(t, env, append([]string{"run", flag, "job:usage", "--"}, cmd...)...)
		assert.Equal(t, exitUsage, code)
		assert.Contains(t, stderr, want)
	}
}

func TestRunReleaseNotConfirmedKeepsCMDsStatus(t *testing.T) {
	servers := redistest.Start(t, 3)
	// TTL 10s: the first renewal comes after 3.3s, long after CMD ends, so
	// the lock is not found lost; only its release fails.
	p := start(t, nodesEnv(servers), append([]string{"run", "--ttl", "10s", "job:norelease", "--"}, helperCmd("hold", "-exit", "4")...)...)
	p.expect("holding job:norelease")
	servers[0].Kill()
	servers[1].Kill()
	p.tell()
	require.Equal(t, 4, p.wait(), "CMD held the lock throughout; stderr %q", p.stderr.String())
	assert.Contains(t, p.stderr.String(), `releasing lock "job:norelease"`)
	assert.Contains(t, p.stderr.String(), "expire within the TTL")
}

// --restart-quarantine, or QUORUMLOCK_RESTART_QUARANTINE, turns on the
// library's restart quarantine (review 16: the command had none): nodes
// that started less than it ago do not count, so run and elect are
// refused with 69, the reason named; a --ttl longer than it, or a variable
// that is not a duration, is a usage error.
func TestRestartQuarantine(t *testing.T) {
	servers := redistest.Start(t, 3)
	env := nodesEnv(servers)
	for _, args := range [][]string{
		{"--restart-quarantine", "1m", "run", "--no-wait", "job:q", "--", "true"},
		{"elect", "--restart-quarantine", "1m", "--no-wait", "job:q", "host-a", "--", "true"},
	} {
		code, _, stderr := run(t, env, args...)
		assert.Equal(t, exitUnavailable, code, "%v: stderr %q", args, stderr)
		assert.Contains(t, stderr, "in restart quarantine: it started recently", args)
	}
	code, _, stderr := run(t, append(env, "QUORUMLOCK_RESTART_QUARANTINE=1m"), "run", "--no-wait", "job:q", "--", "true")
	assert.Equal(t, exitUnavailable, code, "the variable: stderr %q", stderr)
	code, _, stderr = run(t, env, "run", "--restart-quarantine", "1s", "--ttl", "10s", "--no-wait", "job:q", "--", "true")
	assert.Equal(t, exitUsage, code, "a TTL longer than the quarantine: stderr %q", stderr)
	code, _, stderr = run(t, append(env, "QUORUMLOCK_RESTART_QUARANTINE=soon"), "run", "--no-wait", "job:q", "--", "true")
	assert.Equal(t, exitUsage, code, "stderr %q", stderr)
	assert.Contains(t, stderr, "QUORUMLOCK_RESTART_QUARANTINE")
}
