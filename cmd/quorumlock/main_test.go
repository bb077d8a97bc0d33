package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// The tests run the quorumlock binary, built once by TestMain, as users
// do: in processes of its own, against real redis-servers.

// binary is the quorumlock binary under test.
var binary string

// waitFor bounds every wait of these tests for something the processes
// under test signal.
const waitFor = 20 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "quorumlock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "quorumlock")
	args := []string{"build", "-o", binary}
	if raceBuild {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building quorumlock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one quorumlock process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, line by line; closed at its end
	seen   []string    // the lines read so far
	stderr *lockedBuffer
	exited chan struct{}
}

// nodesEnv returns the environment for quorumlock on servers.
func nodesEnv(servers []*redistest.Server) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr()
	}
	return []string{"QUORUMLOCK_NODES=" + strings.Join(urls, ",")}
}

// hungMajority starts 3 servers and pauses 2 of them until the test ends.
func hungMajority(t *testing.T) []*redistest.Server {
	servers := redistest.Start(t, 3)
	for _, s := range servers[:2] {
		s.Pause()
		t.Cleanup(s.Resume)
	}
	return servers
}

// start runs quorumlock with args, env added to this process's own.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 256), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	// Race-enabled programs sleep 1s at exit unless told not to.
	p.cmd.Env = append(append(os.Environ(), helperEnv+"=1", "GORACE=atexit_sleep_ms=0"), env...)
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	var reading sync.WaitGroup
	reading.Go(func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	})
	go func() {
		reading.Wait()
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close() // a helper waiting on its stdin ends
		select {
		case <-p.exited:
		case <-time.After(waitFor):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// run runs quorumlock to its end and returns its exit status and output.
func run(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.wait()
	return code, strings.Join(p.seen, "\n"), p.stderr.String()
}

// expect reads stdout until a line starting with prefix, and returns it.
func (p *proc) expect(prefix string) string {
	p.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				require.FailNow(p.t, "no line "+prefix, "quorumlock ended; stdout %q, stderr %q", p.seen, p.stderr.String())
			}
			p.seen = append(p.seen, line)
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-deadline:
			require.FailNow(p.t, "no line "+prefix, "after %v; stdout %q, stderr %q", waitFor, p.seen, p.stderr.String())
		}
	}
}

// wait waits for the process to end, reading what is left of its stdout,
// and returns its exit status (-1 if a signal killed it).
func (p *proc) wait() int {
	p.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case line, ok := <-p.lines:
			if ok {
				p.seen = append(p.seen, line)
				continue
			}
			<-p.exited // stdout is closed: Wait is all that is left
			return p.cmd.ProcessState.ExitCode()
		case <-deadline:
			require.FailNow(p.t, "quorumlock did not end", "stdout %q, stderr %q", p.seen, p.stderr.String())
		}
	}
}

// tell writes a line to the process's stdin: a holding helper exits.
func (p *proc) tell() {
	p.t.Helper()
	_, err := io.WriteString(p.stdin, "\n")
	require.NoError(p.t, err)
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// library returns a node set over servers for the test itself to lock
// with, as another service would.
func library(t *testing.T, servers []*redistest.Server) *redlock.Redlock {
	t.Helper()
	clients := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	}
	rs, err := redlock.New(clients, redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

// waitQueued waits until a majority of servers have a waiter queued for the
// lock key: a quorumlock waiting for the lock is in line.
func waitQueued(t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	for {
		queued := 0
		for _, s := range servers {
			if s.Running() && s.Do(t, "ZCARD", key+":quorumlock:q").(int64) > 0 {
				queued++
			}
		}
		if queued > len(servers)/2 {
			return
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "nobody queued for "+key)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
