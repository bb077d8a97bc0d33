//go:build !linux

package main

import "syscall"

// sysProcAttr returns nil: outside Linux the servers share this program's
// process group and are killed by Stop only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
