package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
)

// supervise runs argv while l is held: it forwards sigs to CMD's process
// group, stops the group if l is lost (SIGTERM, then SIGKILL at the
// earliest of --kill-after later, killMargin before the validity's end, and
// CMD's own end), kills it killMargin before the validity's end if no
// renewal moved that end, kills what is left of the group once CMD exits,
// then releases l, and returns quorumlock's exit.
func supervise(name string, argv []string, l *lease, f *runFlags, sigs <-chan os.Signal) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(), "QUORUMLOCK_NAME="+name, "QUORUMLOCK_FENCING_TOKEN="+strconv.FormatUint(l.token, 10))
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, which signals go to
	dieWithQuorumlock(c.SysProcAttr)
	// Job control: CMD's group is not the terminal's job, so Ctrl-Z (SIGTSTP)
	// would stop quorumlock alone, and no renewal would run while CMD did.
	// It stops CMD's group first; at SIGCONT (also after a SIGSTOP, which
	// cannot be caught) CMD goes on only while the validity lasts. Caught
	// from before CMD starts, which may be at once.
	jobs := make(chan os.Signal, 2)
	signal.Notify(jobs, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(jobs)
	done, err := startCMD(c)
	if err != nil {
		_ = l.release(context.Background())
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		return exit(code, "cannot run %s (the %s on %q is released): %v", argv[0], l.what(), name, err)
	}
	group := -c.Process.Pid

	// until is the validity's end as last known; time.Until measures it on
	// the monotonic clock. kill fires killMargin before it, or, once the
	// lock is lost, at the SIGKILL that --kill-after may bring forward.
	margin := killMargin(l.ttl)
	until := l.until()
	kill := time.NewTimer(time.Until(until.Add(-margin)))
	defer kill.Stop()
	lost := l.lost()
	var cause error // why the lock was lost while CMD ran; nil if it was not
	// valid reports whether CMD may run now: the lock not lost, its
	// validity as last renewed more than killMargin from its end.
	valid := func() bool {
		u := l.until() // zero once found lost
		return cause == nil && !u.IsZero() && time.Until(u.Add(-margin)) > 0
	}
wait:
	for {
		select {
		case sig := <-sigs:
			_ = syscall.Kill(group, sig.(syscall.Signal))
			if valid() { // a stopped CMD (a read from the terminal: SIGTTIN) sees it only once continued, as timeout(1) knows
				_ = syscall.Kill(group, syscall.SIGCONT)
			}
		case sig := <-jobs:
			if sig == syscall.SIGTSTP {
				_ = syscall.Kill(group, syscall.SIGSTOP)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) // until SIGCONT, which this loop reads next
				continue
			}
			if valid() {
				_ = syscall.Kill(group, syscall.SIGCONT)
				continue
			}
			if cause == nil {
				cause = errors.New("quorumlock was stopped (SIGTSTP, SIGSTOP) and resumed with less than TTL/20 of the validity left, or none")
				fmt.Fprintf(os.Stderr, "quorumlock: %s %q not renewed while quorumlock was stopped (%v): sending SIGKILL\n", l.what(), name, cause)
			}
			_ = syscall.Kill(group, syscall.SIGKILL) // stopped or not, it never runs again
		case <-lost:
			lost, cause = nil, l.cause()
			if u := l.until(); u.After(until) {
				until = u // l.until() is zero once found lost: the end last read stays
			}
			at := min(f.killAfter, time.Until(until.Add(-margin)))
			fmt.Fprintf(os.Stderr, "quorumlock: %s %q lost while CMD ran (%v): sending SIGTERM, SIGKILL in %v\n", l.what(), name, cause, max(at, 0).Round(time.Millisecond))
			_ = syscall.Kill(group, syscall.SIGTERM)
			kill.Reset(at)
		case <-kill.C:
			if u := l.until(); cause == nil && u.After(until) {
				until = u // renewed
				kill.Reset(time.Until(until.Add(-margin)))
				continue
			}
			if cause == nil {
				cause = fmt.Errorf("its validity ends in %v and no renewal moved it", time.Until(until).Round(time.Millisecond))
				fmt.Fprintf(os.Stderr, "quorumlock: %s %q not renewed while CMD ran (%v): sending SIGKILL\n", l.what(), name, cause)
			}
			_ = syscall.Kill(group, syscall.SIGKILL)
		case <-done:
			break wait
		}
	}
	// What CMD leaves in its group would go on without the lock, overlapping
	// the next holder: killed before the release, however CMD ended.
	_ = syscall.Kill(group, syscall.SIGKILL)

	err = l.release(context.Background())
	switch {
	case cause != nil:
		return exit(exitLost, "%s %q was lost while CMD ran, which was stopped: %v", l.what(), name, cause)
	case errors.Is(err, mutex.ErrNotHeld):
		// Found at the release: the lock expired or was taken from us
		// before CMD ended, so CMD may have overlapped another holder.
		return exit(exitLost, "%s %q was lost before CMD ended: %v", l.what(), name, err)
	case err != nil:
		fmt.Fprintf(os.Stderr, "quorumlock: releasing %s %q: %v (its keys expire within the TTL, %v)\n", l.what(), name, err, l.ttl)
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

// startCMD starts c and returns a channel that gets c.Wait's result. The
// goroutine that starts c stays locked to its OS thread until c has ended:
// on Linux, the parent-death signal (dieWithQuorumlock) comes when the
// thread that forked the child ends, not the process (prctl(2),
// PR_SET_PDEATHSIG), and the runtime ends a thread whose goroutine exits
// while locked to it, which any goroutine of this process could do on the
// thread that forked c if it were not kept.
func startCMD(c *exec.Cmd) (<-chan error, error) {
	started, done := make(chan error, 1), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- c.Wait()
	}()
	return done, <-started
}
