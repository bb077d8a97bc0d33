package redistest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// startAttempts bounds how many ports Start tries for one server when the
// port it picked is taken before redis-server binds it.
const startAttempts = 5

// Server is one redis-server process started by [Start], together with its
// port and working directory, which stay the same across restarts. Its
// methods are safe for concurrent use.
type Server struct {
	t            testing.TB // reports failures; its Cleanup ends the server
	bin          string     // absolute path of redis-server
	cfg          Config
	dir          string // working directory, a t.TempDir()
	debugCommand bool   // pass --enable-debug-command local

	mu      sync.Mutex
	port    int             // set once the first process is ready
	proc    *process        // current process; nil once killed
	paused  bool            // proc has been sent SIGSTOP
	clients []*redis.Client // made by Client, closed at cleanup
	closed  bool            // cleanup has run
}

// Start starts n redis-server processes in parallel and returns them once
// every one answers PING (at most 10s each). Each binds 127.0.0.1 only, on a
// free port, runs in its own t.TempDir() with --save "" (no RDB snapshots),
// the append-only file off unless [WithAOF], --protected-mode yes and
// --daemonize no, and logs to redis.log in that directory.
//
// Start skips or fails the test as [Require] does when redis-server is
// missing, and fails it with the server's log if a server does not come up.
// It registers a t.Cleanup that closes the clients made by [Server.Client],
// resumes paused servers, SIGKILLs every process it started and waits for it
// to be reaped. Only the temporary directories, which the testing package
// removes, are left behind.
func Start(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: Start: n = %d, want at least 1", n)
	}
	bin := Require(t)
	major, err := majorVersion(bin)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	cfg := newConfig(opts)
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = newServer(t, bin, cfg, major)
	}
	// Registered before anything starts, and after t.TempDir registered the
	// directories' removal, so it runs first and also ends the servers of a
	// Start that fails half-way.
	t.Cleanup(func() {
		for _, s := range servers {
			s.cleanup()
		}
	})

	ports, err := freePorts(n)
	if err != nil {
		t.Fatalf("redistest: picking free ports: %v", err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.start(ports[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return servers
}

// newServer returns a Server, not yet started, for redis-server major
// version major at bin, in a new t.TempDir().
func newServer(t testing.TB, bin string, cfg Config, major int) *Server {
	return &Server{
		t:            t,
		bin:          bin,
		cfg:          cfg,
		dir:          t.TempDir(),
		debugCommand: major >= 7,
	}
}

// StartOne is Start(t, 1, opts...)[0].
func StartOne(t testing.TB, opts ...Option) *Server {
	t.Helper()
	return Start(t, 1, opts...)[0]
}

// Addrs returns the "127.0.0.1:port" addresses of servers, in order.
func Addrs(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across restarts.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the server's TCP port. It stays the same across restarts.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir returns the server's working directory, which holds its data files and
// redis.log. It is removed when the test ends.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the current redis-server process, or 0 if
// the server is not running. It changes with every restart.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.liveLocked(); p != nil {
		return p.pid()
	}
	return 0
}

// Running reports whether the server's process is alive: started, and not
// killed or exited since. A paused server is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.liveLocked() != nil
}

// start starts the server's first process on port, or on fresh ports if that
// one turns out to be taken.
func (s *Server) start(port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		p, err := s.boot(port)
		if err == nil {
			s.port, s.proc = port, p
			return nil
		}
		if !errors.Is(err, errPortInUse) || attempt == startAttempts {
			return err
		}
		ports, err := freePorts(1)
		if err != nil {
			return fmt.Errorf("picking a free port: %w", err)
		}
		port = ports[0]
	}
}

// boot starts a redis-server process on port and waits until it answers PING.
// If it does not, boot makes sure the process is gone and returns an error
// that includes what the process logged; the error wraps errPortInUse if the
// process could not bind the port.
func (s *Server) boot(port int) (*process, error) {
	mark := markLogs(s.dir)
	p, err := startProcess(s.bin, s.cfg.args(port, s.dir, s.debugCommand), s.dir)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err = waitReady(p, addr, s.cfg.Password)
	if err == nil {
		return p, nil
	}
	if kerr := p.kill(false); kerr != nil {
		err = errors.Join(err, kerr)
	}
	log := logs(s.dir, mark)
	if strings.Contains(log, "Address already in use") {
		err = fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return nil, fmt.Errorf("redis-server on %s (pid %d, dir %s): %w%s", addr, p.pid(), s.dir, err, log)
}

// liveLocked returns the current process if it has not exited.
func (s *Server) liveLocked() *process {
	if s.proc == nil || s.proc.exited() {
		return nil
	}
	return s.proc
}

func (s *Server) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// cleanup closes the clients made by Client and ends the process. It reports
// failures with Errorf, so that every server gets cleaned up.
func (s *Server) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.clients {
		if err := closeClient(c); err != nil {
			s.t.Errorf("redistest: closing client of %s: %v", s.addrLocked(), err)
		}
	}
	s.clients = nil
	if err := s.killLocked(); err != nil {
		s.t.Errorf("redistest: cleanup %s: %v", s.addrLocked(), err)
	}
}
