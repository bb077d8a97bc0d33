package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// TestElectionAcrossProcesses starts this test binary again as each
	// candidate process.
	if id, err := strconv.Atoi(os.Getenv(candidateEnv)); err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		if id == 0 {
			err = runObserver(ctx, os.Stdout, os.Getenv(candidateNodesEnv))
		} else {
			err = runCandidate(ctx, os.Stdout, os.Getenv(candidateNodesEnv), id)
		}
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

const (
	candidateEnv      = "LEADER_EXAMPLE_CANDIDATE" // the candidate's id; 0: the observer
	candidateNodesEnv = "LEADER_EXAMPLE_NODES"
)

// TestElection runs the program as `go run ./examples/leader` does, on
// embedded nodes and with -nodes pointing at 3 real redis-servers, and checks
// its claims from the log of terms: at most one leader at any time, each new
// leader elected only after the previous leader stopped, after each crash a
// different candidate leading within 3 TTLs, and the observer seeing every
// leader, fencing tokens rising.
func TestElection(t *testing.T) {
	for name, urls := range map[string]func(t *testing.T) string{
		"embedded": func(*testing.T) string { return "" },
		"redis": func(t *testing.T) string {
			var list []string
			for _, a := range redistest.Addrs(redistest.Start(t, 3)) {
				list = append(list, "redis://"+a)
			}
			return strings.Join(list, ",")
		},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := run(t.Context(), t.Output(), urls(t))
			require.NoError(t, err)

			assert.Equal(t, 1, rep.MostLeaders, "candidates acting as leader at once, at most")
			terms := slices.SortedFunc(slices.Values(rep.Terms), func(a, b term) int { return a.Start.Compare(b.Start) })
			require.GreaterOrEqual(t, len(terms), crashes+1)
			for i, tm := range terms {
				require.False(t, tm.End.IsZero(), "term %d never ended", i)
				assert.False(t, tm.End.Before(tm.Start), "term %d ends before it starts", i)
				if i == 0 {
					continue
				}
				prev := terms[i-1]
				assert.False(t, tm.Start.Before(prev.End), "term %d (candidate %d) overlaps term %d (candidate %d)", i, tm.Candidate, i-1, prev.Candidate)
				if prev.How == "crashed" {
					assert.NotEqual(t, prev.Candidate, tm.Candidate, "a crashed candidate does not come back")
				}
			}
			crashed := 0
			for _, tm := range terms {
				if tm.How == "crashed" {
					crashed++
				}
			}
			assert.Equal(t, crashes, crashed)

			require.GreaterOrEqual(t, len(rep.Observed), len(terms), "the observer saw every leader")
			for i := 1; i < len(rep.Observed); i++ {
				assert.Greater(t, rep.Observed[i].FencingToken, rep.Observed[i-1].FencingToken, "each new leader has a larger fencing token")
			}
			require.Len(t, rep.Takeovers, crashes)
			for _, d := range rep.Takeovers {
				assert.Positive(t, d)
				assert.LessOrEqual(t, d, 3*ttl, "a new leader within 3 TTLs of the crash")
			}
		})
	}
}

// TestElectionAcrossProcesses runs 3 candidates as separate processes
// (-candidate mode) on 3 real redis-servers, kills the leader with SIGKILL
// twice, and checks from their output: one leader at first and no other
// while it lives, after each kill exactly one new leader, a different
// process, within 3 TTLs; the last one steps down and resigns on SIGTERM;
// and an observer process (-observe) prints each of them as it leads.
func TestElectionAcrossProcesses(t *testing.T) {
	var urls []string
	for _, a := range redistest.Addrs(redistest.Start(t, 3)) {
		urls = append(urls, "redis://"+a)
	}
	type event struct {
		id   int
		line string
	}
	events, observed := make(chan event, 64), make(chan event, 64)
	procs := map[int]*exec.Cmd{}
	for id := 0; id <= candidates; id++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", candidateEnv, id), candidateNodesEnv+"="+strings.Join(urls, ","))
		cmd.Stderr = t.Output()
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		procs[id] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // ours, by its pid; an error only means it has exited
			_ = cmd.Wait()
		})
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if id == 0 {
					observed <- event{id, sc.Text()}
				} else {
					events <- event{id, sc.Text()}
				}
			}
		}()
	}
	// next returns the next event matching want, failing on any "leader" or
	// "not leader" event that is not wanted.
	next := func(within time.Duration, want string) event {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case e := <-events:
				t.Log(e.line)
				if strings.HasSuffix(e.line, want) {
					return e
				}
				require.NotContains(t, e.line, "leader", "unexpected while waiting for %q", want)
			case <-deadline:
				t.Fatalf("no %q within %v", want, within)
			}
		}
	}
	// noLeaderEvent checks that for d no candidate becomes or stops being
	// leader: the current leader keeps its lock by renewing it.
	noLeaderEvent := func(d time.Duration) {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case e := <-events:
				t.Log(e.line)
				require.NotContains(t, e.line, "leader", "while one candidate leads")
			case <-deadline:
				return
			}
		}
	}

	// observes waits until the observer prints candidate id as the leader.
	observes := func(id int) {
		t.Helper()
		want := fmt.Sprintf("candidate %d (pid %d) leads", id, procs[id].Process.Pid)
		deadline := time.After(3 * ttl)
		for {
			select {
			case e := <-observed:
				t.Log(e.line)
				if strings.Contains(e.line, want) {
					return
				}
			case <-deadline:
				t.Fatalf("the observer did not print %q within %v", want, 3*ttl)
			}
		}
	}

	leader := next(30*time.Second, ": leader")
	observes(leader.id)
	var killed []int
	for range crashes {
		noLeaderEvent(3 * ttl) // longer than the TTL: only the renewals keep it
		require.NoError(t, procs[leader.id].Process.Signal(syscall.SIGKILL))
		_ = procs[leader.id].Wait()
		killedAt := time.Now()
		killed = append(killed, leader.id)
		leader = next(3*ttl, ": leader")
		t.Logf("candidate %d leads %v after candidate %d was killed", leader.id, time.Since(killedAt).Round(time.Millisecond), killed[len(killed)-1])
		require.NotContains(t, killed, leader.id)
		observes(leader.id)
	}
	noLeaderEvent(ttl)
	require.NoError(t, procs[leader.id].Process.Signal(syscall.SIGTERM))
	next(10*time.Second, "stepped down (resign: ok)")
}
