//go:build !linux

package main

import "syscall"

// dieWithQuorumlock does nothing: outside Linux, CMD outlives a quorumlock
// killed with SIGKILL.
func dieWithQuorumlock(*syscall.SysProcAttr) {}
