package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
)

// supervise runs argv while l is held: it forwards sigs to CMD's process
// group, stops the group if l is lost (SIGTERM, then SIGKILL after
// --kill-after, or as soon as CMD ends), releases l once CMD exits, and
// returns quorumlock's exit.
func supervise(name string, argv []string, l *lease, f *runFlags, sigs <-chan os.Signal) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(), "QUORUMLOCK_NAME="+name, "QUORUMLOCK_FENCING_TOKEN="+strconv.FormatUint(l.token, 10))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, which signals go to
	if err := c.Start(); err != nil {
		_ = l.release(context.Background())
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return exit(code, "cannot run %s (the lock on %q is released): %v", argv[0], name, err)
	}
	group := -c.Process.Pid
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()

	lost := l.lost()
	var kill <-chan time.Time
	var killer *time.Timer
	var cause error // why the lock was lost while CMD ran; nil if it was not
wait:
	for {
		select {
		case sig := <-sigs:
			_ = syscall.Kill(group, sig.(syscall.Signal))
		case <-lost:
			lost, cause = nil, l.cause()
			fmt.Fprintf(os.Stderr, "quorumlock: lock %q lost while CMD ran (%v): sending SIGTERM, SIGKILL in %v\n", name, cause, f.killAfter)
			_ = syscall.Kill(group, syscall.SIGTERM)
			killer = time.NewTimer(f.killAfter)
			kill = killer.C
		case <-kill:
			kill = nil
			_ = syscall.Kill(group, syscall.SIGKILL)
		case <-done:
			break wait
		}
	}
	if killer != nil {
		// CMD ended after the loss; what it leaves in its group, which had
		// the SIGTERM too, would go on without the lock.
		killer.Stop()
		_ = syscall.Kill(group, syscall.SIGKILL)
	}

	err := l.release(context.Background())
	switch {
	case cause != nil:
		return exit(exitLost, "lock %q was lost while CMD ran, which was stopped: %v", name, cause)
	case errors.Is(err, mutex.ErrNotHeld):
		// Found at the release: the lock expired or was taken from us
		// before CMD ended, so CMD may have overlapped another holder.
		return exit(exitLost, "lock %q was lost before CMD ended: %v", name, err)
	case err != nil:
		fmt.Fprintf(os.Stderr, "quorumlock: releasing lock %q: %v (its keys expire within the TTL, %v)\n", name, err, l.ttl)
	}
	ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return &exitError{code: exitSignal + int(ws.Signal())}
	}
	if code := ws.ExitStatus(); code != 0 {
		return &exitError{code: code}
	}
	return nil
}
