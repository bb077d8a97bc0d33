package idempotency_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// The environment of a child process (TestChildProcess).
const (
	envChild     = "QUORUMLOCK_IDEMPOTENCY_CHILD" // "concurrent" or "hang"
	envAddrs     = "QUORUMLOCK_IDEMPOTENCY_ADDRS" // the nodes, comma-separated
	envOut       = "QUORUMLOCK_IDEMPOTENCY_OUT"   // where a concurrent child writes its outcomes
	childCalls   = 20                             // calls of a concurrent child, all at once
	childLockTTL = 2 * time.Second                // a hanging child's lock TTL
	counterKey   = "test:runs"                    // on node 0: how many times the work ran
)

// outcome is one call of Do in a concurrent child.
type outcome struct {
	Ran, Replayed, InProgress bool
	Resp, Err                 string
}

// child is a test process started by startChild.
type child struct {
	cmd    *exec.Cmd
	log    string
	ready  *bufio.Reader // fd 3 of the child: lines it reports
	start  *os.File      // closing it starts a concurrent child's calls
	exited chan struct{}
}

// startChild starts this test binary as a child running mode on servers,
// and returns once it reported "ready" on fd 3.
func startChild(t *testing.T, mode string, servers []*redistest.Server, out string) *child {
	t.Helper()
	dir := t.TempDir()
	c := &child{log: filepath.Join(dir, "log"), exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.count=1", "-test.timeout=2m")
	c.cmd.Env = append(os.Environ(), envChild+"="+mode, envAddrs+"="+strings.Join(redistest.Addrs(servers), ","), envOut+"="+out)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no child outlives this process
	logFile, err := os.Create(c.log)
	require.NoError(t, err)
	t.Cleanup(func() { _ = logFile.Close() })
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	stdin, start, err := os.Pipe()
	require.NoError(t, err)
	readyR, readyW, err := os.Pipe()
	require.NoError(t, err)
	c.cmd.Stdin, c.cmd.ExtraFiles = stdin, []*os.File{readyW}
	require.NoError(t, c.cmd.Start())
	_, _ = stdin.Close(), readyW.Close()
	c.start, c.ready = start, bufio.NewReader(readyR)
	t.Cleanup(func() { _, _ = readyR.Close(), start.Close() })
	pid := c.cmd.Process.Pid
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = syscall.Kill(pid, syscall.SIGKILL) // only this pid
			<-c.exited
		}
	})
	c.expect(t, "ready")
	return c
}

// expect reads the child's next line on fd 3 and requires it to be want.
func (c *child) expect(t *testing.T, want string) {
	t.Helper()
	line, err := c.ready.ReadString('\n')
	b, _ := os.ReadFile(c.log)
	require.NoError(t, err, "child exited before saying %q:\n%s", want, b)
	require.Equal(t, want+"\n", line)
}

// Once under concurrency: 100 calls with one key at once, 20 in each of 5
// processes with a Redlock of their own: the work runs exactly once, and
// every other call gets ErrInProgress or that run's response, replayed.
func TestDoOnceUnderConcurrencyInProcesses(t *testing.T) {
	servers := redistest.Start(t, 3)
	dir := t.TempDir()
	children := make([]*child, 5)
	outs := make([]string, len(children))
	for i := range children {
		outs[i] = filepath.Join(dir, fmt.Sprintf("out%d.json", i))
		children[i] = startChild(t, "concurrent", servers, outs[i])
	}
	for _, c := range children {
		require.NoError(t, c.start.Close()) // all at once
	}
	var all []outcome
	for i, c := range children {
		select {
		case <-c.exited:
		case <-time.After(time.Minute): // far beyond a run of about a second
			t.Fatalf("child %d still running after a minute", i)
		}
		b, err := os.ReadFile(outs[i])
		log, _ := os.ReadFile(c.log)
		require.NoError(t, err, "child %d wrote no outcomes:\n%s", i, log)
		var got []outcome
		require.NoError(t, json.Unmarshal(b, &got))
		all = append(all, got...)
	}
	require.Len(t, all, 5*childCalls)
	var ran []string
	replayed, inProgress := 0, 0
	for _, o := range all {
		switch {
		case o.Ran:
			ran = append(ran, o.Resp)
		case o.Replayed:
			replayed++
		case o.InProgress:
			inProgress++
		default:
			t.Errorf("a call failed: %s", o.Err)
		}
	}
	t.Logf("ran %d, replayed %d, in progress %d", len(ran), replayed, inProgress)
	require.Len(t, ran, 1, "calls that ran the work")
	require.Equal(t, "1", servers[0].Do(t, "GET", counterKey), "runs of the work, as the work counted them")
	for _, o := range all {
		if o.Replayed {
			require.Equal(t, ran[0], o.Resp, "a replay answered another response")
		}
	}
}

// A holder that dies during the work (SIGKILL) leaves no record; the key
// stays in progress until its lock's TTL ends, then a call runs the work.
func TestDoHolderKilledMidWork(t *testing.T) {
	servers := redistest.Start(t, 3)
	c := startChild(t, "hang", servers, "")
	c.expect(t, "working")
	require.NoError(t, c.cmd.Process.Kill())
	<-c.exited
	killed := time.Now()
	s := idempotency.New(newRedlock(t, servers), idempotency.WithLockTTL(childLockTTL))
	_, _, err := do(t, s, "k", "r", func(context.Context) ([]byte, error) {
		return nil, errors.New("ran while the dead holder's lock lasted")
	})
	require.ErrorIs(t, err, idempotency.ErrInProgress)
	require.Less(t, time.Since(killed), childLockTTL/2, "the machine is too slow for this test")
	require.Zero(t, recordsOn(t, servers, "k"))
	w := &counted{resp: "ran after the dead holder"}
	require.Eventually(t, func() bool {
		_, _, err := do(t, s, "k", "r", w.fn)
		return err == nil
	}, childLockTTL+5*time.Second, 50*time.Millisecond)
	require.Equal(t, int32(1), w.runs.Load())
	requireReplays(t, s, "k", "r", w.resp)
}

// TestChildProcess is a child of the tests above; run directly, it does
// nothing. It says "ready" on fd 3 once connected. A "concurrent" child
// then makes childCalls calls of Do with key "k" at once when its stdin
// closes, and writes their outcomes; a "hang" child says "working" from
// inside its work, which never returns.
func TestChildProcess(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		t.Skip("runs only as a child process")
	}
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv(envAddrs), ",") {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 100})
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, c.Ping(t.Context()).Err())
		clients = append(clients, c)
	}
	rs, err := redlock.New(clients, redlock.WithNodeTimeout(nodeTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	ready := os.NewFile(3, "ready")
	say := func(s string) { _, err := fmt.Fprintln(ready, s); require.NoError(t, err) }
	say("ready")

	if mode == "hang" {
		s := idempotency.New(rs, idempotency.WithLockTTL(childLockTTL))
		_, _, err := s.Do(t.Context(), "k", []byte("r"), func(ctx context.Context) ([]byte, error) {
			say("working")
			<-ctx.Done() // killed before
			return nil, ctx.Err()
		})
		t.Fatalf("the work returned: %v", err)
	}
	_, _ = os.Stdin.Read(make([]byte, 1)) // EOF: go
	s := idempotency.New(rs)
	outcomes := make([]outcome, childCalls)
	var wg sync.WaitGroup
	for i := range outcomes {
		wg.Go(func() {
			o := &outcomes[i]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, replayed, err := s.Do(ctx, "k", []byte("r"), func(ctx context.Context) ([]byte, error) {
				if err := clients[0].Incr(ctx, counterKey).Err(); err != nil {
					return nil, err
				}
				o.Ran = true
				time.Sleep(20 * time.Millisecond) // the work: a call to a payment API
				return []byte("charged by " + strconv.Itoa(os.Getpid())), nil
			})
			o.Replayed, o.InProgress, o.Resp = replayed, errors.Is(err, idempotency.ErrInProgress), string(resp)
			if err != nil {
				o.Ran, o.Err = false, err.Error()
			}
		})
	}
	wg.Wait()
	b, err := json.Marshal(outcomes)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(os.Getenv(envOut), b, 0o600))
}
