package redistest

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

const (
	// rebindTimeout bounds how long Restart keeps retrying when the server's
	// port is still in use.
	rebindTimeout = 5 * time.Second

	// rebindBackoff is the pause between two such retries. Nothing signals
	// that a port has become free, so this is a plain sleep.
	rebindBackoff = 20 * time.Millisecond

	// signalTimeout bounds the wait for SIGSTOP or SIGCONT to take effect.
	signalTimeout = 5 * time.Second
)

// Kill sends SIGKILL to the server's process and blocks until the process has
// been reaped (at most 10s), so connections to its port are refused once Kill
// returns. Killing a server that is not running does nothing.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		s.t.Fatalf("redistest: Kill %s: %v", s.addrLocked(), err)
	}
}

// Pause sends SIGSTOP to the server's process and, on Linux, blocks until the
// process is stopped. While paused the kernel still accepts connections on
// the port, but nothing reads or answers them: clients see timeouts, not
// errors. Pausing a paused server does nothing; pausing a server that is not
// running fails the test.
func (s *Server) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused && s.liveLocked() != nil {
		return
	}
	if err := s.signalLocked(sigStop, true); err != nil {
		s.t.Fatalf("redistest: Pause %s: %v", s.addrLocked(), err)
	}
	s.paused = true
}

// Resume sends SIGCONT to a paused server's process and, on Linux, blocks
// until it runs again; it then answers the requests that queued up while it
// was paused. Resuming a server that is not paused does nothing.
func (s *Server) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused || s.liveLocked() == nil {
		return
	}
	if err := s.signalLocked(sigCont, false); err != nil {
		s.t.Fatalf("redistest: Resume %s: %v", s.addrLocked(), err)
	}
	s.paused = false
}

// Restart kills the server's process if it is running (as Kill does) and
// starts a new one on the same port and in the same directory, blocking
// until it answers PING. With [WithAOF] the append-only file is kept, so
// every acknowledged write survives; otherwise the data files are removed
// first and the new server starts empty. If the port is still in use, Restart
// retries for up to 5s before failing the test. Other methods of s block
// until Restart returns.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.restart(!s.cfg.AOF); err != nil {
		s.t.Fatalf("redistest: Restart %s: %v", s.Addr(), err)
	}
}

// RestartKeepingData is like Restart, but never removes the data files: a
// server without AOF reloads its last RDB snapshot (taken with SAVE), as a
// Redis with default persistence does after a crash, losing what was
// written since.
func (s *Server) RestartKeepingData() {
	s.t.Helper()
	if err := s.restart(false); err != nil {
		s.t.Fatalf("redistest: RestartKeepingData %s: %v", s.Addr(), err)
	}
}

// RestartEmpty is like Restart, but always removes the data files first, so
// the new server starts empty even with [WithAOF].
func (s *Server) RestartEmpty() {
	s.t.Helper()
	if err := s.restart(true); err != nil {
		s.t.Fatalf("redistest: RestartEmpty %s: %v", s.Addr(), err)
	}
}

func (s *Server) restart(empty bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the test that started the server has ended")
	}
	if err := s.killLocked(); err != nil {
		return err
	}
	if empty {
		if err := s.removeData(); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(rebindTimeout)
	for {
		p, err := s.boot(s.port)
		if err == nil {
			s.proc = p
			return nil
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(rebindBackoff)
	}
}

// removeData removes everything in the server's directory except the log
// files and a Cluster node's own state file: the RDB file and the
// append-only file or directory, whatever their names.
func (s *Server) removeData() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name := e.Name(); name != logFile && name != outputFile && name != clusterConfigFile {
			if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// killLocked kills the current process, if any, and forgets it. A process
// that could not be killed is kept, so that cleanup tries again.
func (s *Server) killLocked() error {
	if s.proc == nil {
		return nil
	}
	if err := s.proc.kill(s.paused); err != nil {
		return err
	}
	s.proc, s.paused = nil, false
	return nil
}

// signalLocked sends sig to the running process and waits until it is
// stopped or no longer stopped, as stopped says.
func (s *Server) signalLocked(sig os.Signal, stopped bool) error {
	if sig == nil {
		return errors.New("not supported on this operating system")
	}
	p := s.liveLocked()
	if p == nil {
		return errors.New("server is not running")
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	return awaitStopped(p.pid(), stopped, signalTimeout)
}
