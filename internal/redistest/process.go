package redistest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	// logFile is the name, inside a server's directory, of the file
	// redis-server logs to (--logfile).
	logFile = "redis.log"

	// outputFile is the name, inside a server's directory, of the file that
	// receives redis-server's stdout and stderr, where it reports errors
	// found before it opens logFile (bad arguments, for instance).
	outputFile = "redis.out"

	// killTimeout bounds the wait for a SIGKILLed process to be reaped.
	killTimeout = 10 * time.Second
)

// errPortInUse reports that redis-server exited because it could not bind its
// port.
var errPortInUse = errors.New("port already in use")

// process is one running redis-server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // result of cmd.Wait; read only after done is closed
}

// startProcess starts bin with args in dir, with stdout and stderr appended
// to dir/outputFile. It does not wait for the server to be ready. A goroutine
// reaps the process and closes p.done; it ends as soon as the process exits.
func startProcess(bin string, args []string, dir string) (*process, error) {
	out, err := os.OpenFile(filepath.Join(dir, outputFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// An *os.File is handed to the child as is: exec starts no copying
	// goroutine, so Wait returns as soon as the process is gone.
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close() // the child has its own copy
	if err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and blocks until the process has been reaped, at most
// killTimeout. If resume is set it first sends SIGCONT, so that a paused
// process is not left stopped should the kill fail. Killing a process that
// has already exited is not an error.
func (p *process) kill(resume bool) error {
	if resume && sigCont != nil {
		// Errors are ignored: the SIGKILL below is what matters.
		_ = p.cmd.Process.Signal(sigCont)
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill pid %d: %w", p.pid(), err)
	}
	timer := time.NewTimer(killTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		return fmt.Errorf("pid %d still not reaped %v after SIGKILL", p.pid(), killTimeout)
	}
}

// logs returns what redis-server wrote to its log and output files in dir
// from the offsets in mark on, for error messages.
func logs(dir string, mark logMark) string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		off  int64
	}{{logFile, mark.log}, {outputFile, mark.out}} {
		text := readFrom(filepath.Join(dir, f.name), f.off)
		if text = strings.TrimSpace(text); text != "" {
			fmt.Fprintf(&b, "\n--- %s:\n%s", f.name, text)
		}
	}
	return b.String()
}

// logMark records the sizes of the log and output files in a directory, so
// that logs can return only what one process wrote.
type logMark struct{ log, out int64 }

func markLogs(dir string) logMark {
	return logMark{
		log: fileSize(filepath.Join(dir, logFile)),
		out: fileSize(filepath.Join(dir, outputFile)),
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// maxLogTail bounds how much of a log goes into an error message.
const maxLogTail = 4 << 10

// readFrom returns the content of path from offset off on, at most its last
// maxLogTail bytes, or "" if it cannot be read.
func readFrom(path string, off int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if size := fileSize(path); size-off > maxLogTail {
		off = size - maxLogTail
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
