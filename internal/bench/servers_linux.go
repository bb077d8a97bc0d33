package main

import "syscall"

// sysProcAttr puts each redis-server in its own process group, so that a
// Ctrl-C sent to the terminal's process group reaches only this program,
// which then kills its servers itself, and asks the kernel to SIGKILL the
// server if this program dies without doing so (kill -9).
//
// Pdeathsig fires when the OS thread that started the process exits; Go ends
// a thread only when a goroutine locked to it exits, which this program never
// does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
