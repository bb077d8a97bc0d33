package redistest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr puts each server in its own process group, so that a signal
// sent to the test's process group (Ctrl-C) does not reach it, and asks the
// kernel to SIGKILL it when the test binary dies, so that it cannot outlive
// the test run.
//
// Pdeathsig fires when the OS thread that started the process exits. Go only
// ends threads of goroutines that exit while locked to their thread, which
// this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// stateInterval is the pause between two reads of /proc/PID/stat.
const stateInterval = time.Millisecond

// awaitStopped blocks, at most timeout, until process pid is stopped (state T
// in /proc/PID/stat) if stopped is true, or no longer stopped if it is false.
// A signal is delivered asynchronously; this makes Pause and Resume return
// only once it has taken effect. The kernel offers no notification for that
// which could be used alongside the Wait already running on the process, so
// this polls.
func awaitStopped(pid int, stopped bool, timeout time.Duration) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(timeout)
	for {
		state, err := procState(path)
		if err != nil {
			return err
		}
		if isStopped := state == 'T' || state == 't'; isStopped == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: still in state %c after %v", pid, state, timeout)
		}
		time.Sleep(stateInterval)
	}
}

// procState returns the state field of a /proc/PID/stat file, which follows
// the parenthesised command name.
func procState(path string) (byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("%s: unexpected content %q", path, b)
	}
	return b[i+2], nil
}
