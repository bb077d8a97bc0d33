package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	// startTries bounds how many ports a node tries before giving up: another
	// process can take a free port between the moment it is chosen and the
	// moment redis-server binds it.
	startTries = 5

	// readyTimeout bounds the wait for a new redis-server to answer PING.
	readyTimeout = 10 * time.Second

	// readyPoll is the pause between two PINGs while a server starts.
	readyPoll = 10 * time.Millisecond

	// killTimeout bounds the wait for a SIGKILLed redis-server to be reaped.
	killTimeout = 10 * time.Second

	// logName is the file, in each server's directory, that receives its
	// stdout and stderr (its log).
	logName = "redis.log"
)

// server is one redis-server process started by this program.
type server struct {
	addr string        // 127.0.0.1:port
	dir  string        // its working directory, inside the servers' temp dir
	cmd  *exec.Cmd     // the process; only this program's own children are killed
	done chan struct{} // closed once the process has exited and been reaped
}

// servers is the set of redis-server processes of one run, all in one
// temporary directory that Stop removes.
type servers struct {
	dir  string
	list []*server
}

// startServers starts n redis-server processes from bin, each on a free port
// of 127.0.0.1, without persistence, and returns once every one answers PING.
// On failure it stops those it started and returns the error; ctx aborts the
// wait.
func startServers(ctx context.Context, bin string, n int) (*servers, error) {
	dir, err := os.MkdirTemp("", "quorumlock-bench-")
	if err != nil {
		return nil, err
	}
	s := &servers{dir: dir}
	for i := range n {
		srv, err := startServer(ctx, bin, filepath.Join(dir, "node"+strconv.Itoa(i)))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("node %d: %w", i, err), s.Stop())
		}
		s.list = append(s.list, srv)
	}
	return s, nil
}

// Addrs returns the nodes' addresses, in start order.
func (s *servers) Addrs() []string {
	addrs := make([]string, len(s.list))
	for i, srv := range s.list {
		addrs[i] = srv.addr
	}
	return addrs
}

// Stop kills every server with SIGKILL (by its own pid), waits until each is
// reaped, and removes the temporary directory. It is safe to call twice.
func (s *servers) Stop() error {
	var errs []error
	for _, srv := range s.list {
		errs = append(errs, srv.kill())
	}
	s.list = nil
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
		s.dir = ""
	}
	return errors.Join(errs...)
}

// startServer starts one redis-server in dir, retrying with a new port if the
// one chosen was taken meanwhile.
func startServer(ctx context.Context, bin, dir string) (*server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var last error
	for range startTries {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		srv, err := launch(bin, dir, port)
		if err != nil {
			return nil, err
		}
		err = srv.waitReady(ctx)
		if err == nil {
			return srv, nil
		}
		last = errors.Join(err, srv.kill())
		if ctx.Err() != nil {
			return nil, last
		}
	}
	return nil, fmt.Errorf("redis-server did not start after %d tries: %w", startTries, last)
}

// launch starts bin on port with the settings of a lock node that keeps
// nothing on disk. A goroutine reaps the process and closes done; it ends when
// the process exits, which kill (or the kernel, if this program dies: see
// sysProcAttr) makes sure of.
func launch(bin, dir string, port int) (*server, error) {
	log, err := os.OpenFile(filepath.Join(dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "yes",
		"--dir", dir,
	)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log // an *os.File: no copying goroutine
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	log.Close() // the child has its own copy
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	srv := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit status of a killed server says nothing useful
		close(srv.done)
	}()
	return srv, nil
}

// waitReady polls the server with PING until it answers PONG, it exits, ctx
// is done, or readyTimeout passes.
func (srv *server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	ticker := time.NewTicker(readyPoll)
	defer ticker.Stop()
	for {
		err := ping(ctx, srv.addr)
		if err == nil {
			return nil
		}
		select {
		case <-srv.done:
			return fmt.Errorf("redis-server on %s exited before answering PING; its log:\n%s", srv.addr, srv.log())
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s: no PONG: %w (last: %v)", srv.addr, ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// kill sends SIGKILL to the server's own pid and waits, at most killTimeout,
// until it is reaped. Killing a server that has exited is not an error.
func (srv *server) kill() error {
	if err := srv.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill redis-server pid %d: %w", srv.cmd.Process.Pid, err)
	}
	timer := time.NewTimer(killTimeout)
	defer timer.Stop()
	select {
	case <-srv.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("redis-server pid %d not reaped %v after SIGKILL", srv.cmd.Process.Pid, killTimeout)
	}
}

// log returns the last lines the server wrote, for error messages.
func (srv *server) log() string {
	b, err := os.ReadFile(filepath.Join(srv.dir, logName))
	if err != nil {
		return err.Error()
	}
	const tail = 2 << 10
	if len(b) > tail {
		b = b[len(b)-tail:]
	}
	return strings.TrimSpace(string(b))
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// ping sends one inline PING to addr on a new connection and returns nil if
// the answer is +PONG. It gives up after a second or when ctx is done.
func ping(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// serverVersionRE finds the version in `redis-server --version` output such
// as "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64".
var serverVersionRE = regexp.MustCompile(`\bv=(\S+)`)

// serverVersion returns the version of the redis-server binary bin.
func serverVersion(ctx context.Context, bin string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	m := serverVersionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", fmt.Errorf("no version in %q", out)
	}
	return m[1], nil
}

// findRedisServer returns the redis-server to run: redis-server on PATH, else
// /usr/bin/redis-server. It fails with installation hints when neither exists.
func findRedisServer() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	const fallback = "/usr/bin/redis-server"
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", errors.New("redis-server not found on PATH nor at /usr/bin/redis-server; install it (apt-get install -y redis-server, or brew install redis) or pass -redis-server")
}
