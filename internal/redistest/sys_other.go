//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: the Linux settings (own process group, SIGKILL on
// the test binary's death) have no portable equivalent. Servers are still
// killed at cleanup, but may outlive a test binary that is itself killed.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// awaitStopped returns nil at once: outside Linux there is no cheap way to
// tell that a stop or continue signal has taken effect.
func awaitStopped(pid int, stopped bool, timeout time.Duration) error { return nil }
