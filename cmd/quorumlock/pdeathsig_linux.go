package main

import "syscall"

// dieWithQuorumlock makes the kernel send CMD SIGKILL when this process
// ends, however it ends (SIGKILL and the OOM killer included): strictly,
// when the thread that forked CMD ends, which startCMD keeps for CMD's life.
// It reaches CMD only, not the processes CMD started.
func dieWithQuorumlock(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
