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

// stateInterval is the pause between two reads of the threads' states.
const stateInterval = time.Millisecond

// awaitStopped blocks, at most timeout, until every thread of process pid is
// stopped (state T in /proc/PID/task/TID/stat) if stopped is true, or none is
// if it is false. A signal is delivered asynchronously, and to a process's
// threads one by one; this makes Pause and Resume return only once it has
// taken effect on all of them (redis-server runs background threads). The
// kernel offers no notification for that which could be used alongside the
// Wait already running on the process, so this polls.
func awaitStopped(pid int, stopped bool, timeout time.Duration) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	deadline := time.Now().Add(timeout)
	for {
		done, err := threadsStopped(dir, stopped)
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: threads not all %s after %v", pid, map[bool]string{true: "stopped", false: "running"}[stopped], timeout)
		}
		time.Sleep(stateInterval)
	}
}

// threadsStopped reports whether every thread listed in dir is in the wanted
// state.
func threadsStopped(dir string, stopped bool) (bool, error) {
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		state, err := procState(dir + "/" + task.Name() + "/stat")
		if err != nil {
			return false, err
		}
		if isStopped := state == 'T' || state == 't'; isStopped != stopped {
			return false, nil
		}
	}
	return true, nil
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
