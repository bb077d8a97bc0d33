package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/netfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
)

// ticker is a shell command that ignores SIGTERM, as does the grandchild it
// starts; both append the time (ns) to FILE, its argument, every 10ms until
// killed. It writes its own PID (its process group's) and the grandchild's
// to FILE.pids, then prints "holding".
const ticker = `trap "" TERM
tick() { while :; do date +%s%N >>"$1"; sleep 0.01; done; }
tick "$1" & echo $$ $! >"$1.pids"
echo holding
tick "$1"`

// tickerChild returns the PID of the ticker's grandchild, once it has
// printed "holding". Should the test fail, its cleanup kills the ticker's
// group, which the code under test failed to kill.
func tickerChild(t *testing.T, file string) int {
	t.Helper()
	data, err := os.ReadFile(file + ".pids")
	require.NoError(t, err)
	var group, child int
	_, err = fmt.Sscan(string(data), &group, &child)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(-group, syscall.SIGKILL)
		}
	})
	return child
}

// readTimes returns the times (ns) file holds, one a line.
func readTimes(t *testing.T, file string) []int64 {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var times []int64
	for _, line := range strings.Fields(string(data)) {
		n, err := strconv.ParseInt(line, 10, 64)
		require.NoError(t, err, "a line of %s", file)
		times = append(times, n)
	}
	return times
}

// countFrom returns how many of times are at or after from.
func countFrom(times []int64, from int64) int {
	n := 0
	for _, at := range times {
		if at >= from {
			n++
		}
	}
	return n
}

// Issue 18, point 1: a run cut off from a majority, whose command ignores
// SIGTERM, with the default --kill-after; a second run on every node gets
// the lock once the first one's keys expire. The commands never overlap.
func TestRunCutOffNeverOverlapsTheNextOwner(t *testing.T) {
	servers := redistest.Start(t, 5)
	urls := make([]string, len(servers))
	var proxies []*netfault.Proxy
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr()
		if i < 3 { // A reaches these three through proxies
			p := netfault.New(t, s.Addr())
			proxies = append(proxies, p)
			urls[i] = "redis://" + p.Addr()
		}
	}
	dir := t.TempDir()
	ticks, span := filepath.Join(dir, "a"), filepath.Join(dir, "b")

	a := start(t, []string{"QUORUMLOCK_NODES=" + strings.Join(urls, ",")},
		"run", "--ttl", "2s", "job:cut", "--", "sh", "-c", ticker, "sh", ticks)
	a.expect("holding")
	child := tickerChild(t, ticks)
	for _, p := range proxies {
		p.Blackhole() // A is cut off from a majority; B is not
	}
	b := start(t, nodesEnv(servers), "run", "--ttl", "2s", "--wait", "15s", "job:cut", "--",
		"sh", "-c", `date +%s%N >>"$1"; sleep 0.3; date +%s%N >>"$1"`, "sh", span)
	require.Equal(t, 0, b.wait(), "B ran its command; stderr %q", b.stderr.String())
	require.Equal(t, exitLost, a.wait(), "stderr %q", a.stderr.String())
	assert.True(t, gone(t, child), "A's grandchild, which ignores SIGTERM too, was killed")

	bTimes, aTimes := readTimes(t, span), readTimes(t, ticks)
	require.Len(t, bTimes, 2)
	require.NotEmpty(t, aTimes)
	late := countFrom(aTimes, bTimes[0])
	assert.Zero(t, late, "A's command wrote %d times after B's started (A's last %v after B's start)",
		late, time.Duration(aTimes[len(aTimes)-1]-bTimes[0]))
}

// While renewals fail and the loss is not declared (here: never told),
// the validity's end still bounds CMD: its group is killed before it.
func TestRunKillsCMDBeforeAnUnrenewedValidityEnds(t *testing.T) {
	servers := redistest.Start(t, 3)
	const ttl = 2 * time.Second
	m := library(t, servers).NewMutex("job:unrenewed", mutex.WithTTL(ttl))
	require.NoError(t, m.LockContext(t.Context()))
	until := m.Until()
	l := &lease{token: m.FencingToken(), ttl: ttl, until: m.Until, cause: m.LostCause, unlock: m.UnlockContext,
		lost: func() <-chan struct{} { return nil }} // the library's loss signal never comes
	ticks := filepath.Join(t.TempDir(), "ticks")
	f := &runFlags{ttl: ttl, killAfter: time.Minute}
	done := make(chan error, 1)
	go func() {
		done <- supervise("job:unrenewed", []string{"sh", "-c", ticker, "sh", ticks}, l, f, make(chan os.Signal))
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(ttl + waitFor):
		tickerChild(t, ticks) // for its cleanup
		require.FailNow(t, "CMD ran on past the validity")
	}
	child := tickerChild(t, ticks)
	var ee *exitError
	require.True(t, errors.As(err, &ee), "%v", err)
	assert.Equal(t, exitLost, ee.code, "%v", err)
	assert.True(t, gone(t, child), "CMD's grandchild, which ignores SIGTERM too, was killed")
	times := readTimes(t, ticks)
	require.NotEmpty(t, times)
	last := time.Unix(0, times[len(times)-1])
	assert.True(t, last.Before(until), "CMD wrote %v after the validity's end", last.Sub(until))
}

// A command that leaves a process in its group and ends, normally or by a
// signal: that process is killed before the lock is released, so it never
// works on alongside the next holder.
func TestRunKillsWhatCMDLeavesInItsGroup(t *testing.T) {
	for _, tt := range []struct {
		name, end string
		code      int
	}{
		{"CMD exits 0", "exit 0", 0},
		{"CMD killed by a signal", "kill -KILL $$", exitSignal + int(syscall.SIGKILL)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			env := nodesEnv(servers)
			dir := t.TempDir()
			ticks, span := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			// The background child would tick for 30s at least, past waitFor,
			// every 10ms; off the pipes to the test, which it would keep open.
			left := `date +%s%N >>"$1"
tick() {
	exec </dev/null >/dev/null 2>&1
	i=0; while [ $i -lt 3000 ]; do date +%s%N >>"$1"; sleep 0.01; i=$((i+1)); done
}
tick "$1" & echo $$ $! >"$1.pids"
echo holding
` + tt.end
			a := start(t, env, "run", "--ttl", "2s", "job:left", "--", "sh", "-c", left, "sh", ticks)
			a.expect("holding")
			child := tickerChild(t, ticks)
			b := start(t, env, "run", "--ttl", "2s", "--wait", "15s", "job:left", "--",
				"sh", "-c", `date +%s%N >>"$1"; sleep 0.5; date +%s%N >>"$1"`, "sh", span)
			require.Equal(t, tt.code, a.wait(), "stderr %q", a.stderr.String())
			require.Equal(t, 0, b.wait(), "B ran its command; stderr %q", b.stderr.String())

			bTimes, aTimes := readTimes(t, span), readTimes(t, ticks)
			require.Len(t, bTimes, 2)
			late := countFrom(aTimes, bTimes[0])
			assert.Zero(t, late, "A's background child wrote %d times after B's command started (its last %v after)",
				late, time.Duration(aTimes[len(aTimes)-1]-bTimes[0]))
			assert.True(t, gone(t, child), "A's background child was killed")
		})
	}
}

// stopped waits until process pid is stopped (state T), and reports whether it was.
func stopped(t *testing.T, pid int) bool {
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err == nil && strings.Contains(string(stat), ") T ") {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// Ctrl-Z (SIGTSTP) on run stops CMD's group, which is not the terminal's
// job, before quorumlock: nothing of CMD runs while no renewal does. Resumed
// after the lock expired and another run took it, CMD is killed unrun
// (review 42: both ran at once for 3s, 3 of 3).
func TestRunStoppedByCtrlZNeverOverlapsTheNextOwner(t *testing.T) {
	servers := redistest.Start(t, 3)
	dir := t.TempDir()
	ticks, span := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	a := start(t, nodesEnv(servers), "run", "--ttl", "1s", "job:ctrl-z", "--", "sh", "-c", ticker, "sh", ticks)
	a.expect("holding")
	child := tickerChild(t, ticks)
	a.signal(syscall.SIGTSTP)
	// quorumlock stops once it has stopped CMD's group (whose processes
	// read T, or D while one waits on a stopped vfork child).
	require.True(t, stopped(t, a.cmd.Process.Pid), "quorumlock stops, as a job does")

	b := start(t, nodesEnv(servers), "run", "--ttl", "1s", "--wait", "15s", "job:ctrl-z", "--",
		"sh", "-c", `date +%s%N >>"$1"; sleep 0.3; date +%s%N >>"$1"`, "sh", span)
	require.Equal(t, 0, b.wait(), "B got the lock once A's keys expired; stderr %q", b.stderr.String())
	a.signal(syscall.SIGCONT)
	require.Equal(t, exitLost, a.wait(), "stderr %q", a.stderr.String())
	assert.True(t, gone(t, child), "A's grandchild, stopped, was killed")

	bTimes := readTimes(t, span)
	require.Len(t, bTimes, 2)
	var aTimes []int64 // none when CMD was stopped before its first
	if _, err := os.Stat(ticks); err == nil {
		aTimes = readTimes(t, ticks)
	}
	late := countFrom(aTimes, bTimes[0])
	assert.Zero(t, late, "A's command wrote %d times after B's started", late)
}

// renewal returns a func that waits for the next renewal of key on s: its
// PTTL rises.
func renewal(t *testing.T, s *redistest.Server, key string) func() {
	return func() {
		t.Helper()
		last := int64(-3)
		require.Eventually(t, func() bool {
			v, _ := s.Do(t, "PTTL", key).(int64)
			rose := last > 0 && v > last
			last = v
			return rose
		}, waitFor, 2*time.Millisecond, "a renewal of %s", key)
	}
}

// Resumed while the lock is still valid, CMD goes on and run ends as usual,
// past the validity it had when stopped (review 43: after a renewal, 11 of
// 71 short stops killed CMD at the old validity's end, exit 70).
func TestRunStoppedBrieflyByCtrlZGoesOn(t *testing.T) {
	servers := redistest.Start(t, 3)
	const name = "job:ctrl-z-brief"
	p := start(t, nodesEnv(servers), append([]string{"run", "--ttl", "1s", name, "--"}, helperCmd("hold", "-exit", "4", "-pid")...)...)
	p.expect("holding " + name)
	pid, err := strconv.Atoi(strings.TrimPrefix(p.expect("pid "), "pid "))
	require.NoError(t, err)
	renewed := renewal(t, servers[0], name)
	renewed() // the validity moved since CMD started
	p.signal(syscall.SIGTSTP)
	require.True(t, stopped(t, p.cmd.Process.Pid), "quorumlock stops, as a job does")
	require.True(t, stopped(t, pid), "and CMD with it")
	p.signal(syscall.SIGCONT)
	for range 4 { // past the validity CMD started with
		renewed()
	}
	p.tell() // a line on CMD's stdin: it ends, with its status
	p.expect("done")
	require.Equal(t, 4, p.wait(), "CMD's own status: it held the lock throughout; stderr %q", p.stderr.String())
	requireFree(t, servers, name)
}

// A CMD stopped on its own (a read from the terminal stops it with SIGTTIN:
// it is not the terminal's job) still gets the signals run forwards: they
// are followed by SIGCONT, as timeout(1) does; run ended only once someone
// continued CMD (review 43: Ctrl-C did nothing, the lock held on).
func TestRunForwardsSignalsToAStoppedCMD(t *testing.T) {
	servers := redistest.Start(t, 3)
	p := start(t, nodesEnv(servers), append([]string{"run", "job:stopped-cmd", "--"}, helperCmd("hold", "-exit", "3", "-pid")...)...)
	p.expect("holding job:stopped-cmd")
	pid, err := strconv.Atoi(strings.TrimPrefix(p.expect("pid "), "pid "))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	require.True(t, stopped(t, pid))
	p.signal(syscall.SIGINT)
	p.expect("signal interrupt")
	require.Equal(t, 3, p.wait(), "CMD's own status after the forwarded SIGINT; stderr %q", p.stderr.String())
	requireFree(t, servers, "job:stopped-cmd")
}
