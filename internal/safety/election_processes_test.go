package safety_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/netfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The environment of a candidate process of TestElectionInProcesses.
const (
	envCandidate      = "QUORUMLOCK_ELECTION_CHILD" // the candidate's number
	envCandidateAddrs = "QUORUMLOCK_ELECTION_ADDRS" // the nodes it dials, comma-separated
	electionProcsTTL  = time.Second
)

// TestElectionChild is a candidate of TestElectionInProcesses; it does
// nothing on its own. It campaigns, prints "leader <fence> <unix ns>" once
// it leads and "done <unix ns>" once its Done closes, then exits.
func TestElectionChild(t *testing.T) {
	id := os.Getenv(envCandidate)
	if id == "" {
		t.Skip("a child process of TestElectionInProcesses")
	}
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv(envCandidateAddrs), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	rs, err := redlock.New(clients, redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	e := rs.NewElection("procs", mutex.WithTTL(electionProcsTTL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.NoError(t, e.Campaign(ctx, "child-"+id))
	l, err := e.Leader(ctx)
	require.NoError(t, err)
	fmt.Printf("\nleader %d %d\n", l.FencingToken, time.Now().UnixNano())
	<-e.Done()
	fmt.Printf("\ndone %d\n", time.Now().UnixNano())
	_ = rs.Close()
}

// electionEvent is a line a candidate printed, with its number.
type electionEvent struct {
	child int
	what  string
	a, b  int64
}

// TestElectionInProcesses: three candidates in three OS processes, each
// with its own clients. One leads, alone, past its TTL; SIGKILLed, another leads within the TTL
// plus the wait, with a larger fencing token; that one cut off from a
// majority of the nodes sees its Done close before the third's Campaign
// returns. A process that never campaigns (this one) sees each leader with
// Leader, and Observe delivers them with increasing fencing tokens.
func TestElectionInProcesses(t *testing.T) {
	servers := redistest.Start(t, 3)
	mesh := netfault.NewMesh(t, 3, redistest.Addrs(servers))
	events := make(chan electionEvent, 16)
	pids := make([]int, 3)
	for i := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestElectionChild$", "-test.count=1", "-test.timeout=2m")
		cmd.Env = append(os.Environ(), envCandidate+"="+strconv.Itoa(i), envCandidateAddrs+"="+strings.Join(mesh.Addrs(i), ","))
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		pids[i] = cmd.Process.Pid
		exited := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var ev electionEvent
				if n, _ := fmt.Sscanf(sc.Text(), "%s %d %d", &ev.what, &ev.a, &ev.b); n >= 2 {
					ev.child = i
					events <- ev
				}
			}
			_ = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = syscall.Kill(pids[i], syscall.SIGKILL) // only this pid
			<-exited
		})
	}
	next := func(within time.Duration) electionEvent {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(within):
			require.FailNow(t, "no candidate reported within "+within.String())
			return electionEvent{}
		}
	}
	watcher := lockSet(t, redistest.Clients(t, servers)).NewElection("procs")
	obsCtx, stop := context.WithCancel(t.Context())
	seen := watcher.Observe(obsCtx)
	var fences []uint64
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for l := range seen {
			if l.FencingToken > 0 {
				fences = append(fences, l.FencingToken)
			}
		}
	}()
	leaderIs := func(ev electionEvent) {
		t.Helper()
		l, err := watcher.Leader(t.Context())
		require.NoError(t, err)
		assert.Equal(t, mutex.Leader{Value: fmt.Sprintf("child-%d", ev.child), FencingToken: uint64(ev.a)}, l)
	}

	first := next(30 * time.Second)
	require.Equal(t, "leader", first.what)
	leaderIs(first)
	select { // longer than the TTL: only renewals keep the first leading
	case ev := <-events:
		require.FailNow(t, "another event while the first leader lives", "%+v", ev)
	case <-time.After(electionProcsTTL + electionProcsTTL/4):
	}
	leaderIs(first)

	require.NoError(t, syscall.Kill(pids[first.child], syscall.SIGKILL))
	killed := time.Now()
	second := next(electionProcsTTL + 2*time.Second) // the TTL, plus a waiter's retry delays
	require.Equal(t, "leader", second.what)
	assert.NotEqual(t, first.child, second.child)
	assert.Greater(t, second.a, first.a, "a larger fencing token")
	t.Logf("a new leader %v after the SIGKILL", time.Since(killed))
	leaderIs(second)

	mesh.Partition([]int{second.child}, []int{0, 1}) // cut off from a majority
	done, third := next(electionProcsTTL+2*time.Second), next(electionProcsTTL+2*time.Second)
	if done.what == "leader" {
		done, third = third, done
	}
	require.Equal(t, "done", done.what)
	require.Equal(t, second.child, done.child)
	require.Equal(t, "leader", third.what)
	assert.Less(t, done.a, third.b, "the cut-off leader's Done closed before the next Campaign returned")
	assert.Greater(t, third.a, second.a)
	leaderIs(third)

	stop()
	<-collected
	assert.IsIncreasing(t, fences, "Observe never goes back")
	assert.Subset(t, fences, []uint64{uint64(first.a), uint64(second.a), uint64(third.a)})
}
