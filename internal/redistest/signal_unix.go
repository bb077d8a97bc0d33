//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// sigStop and sigCont implement Pause and Resume.
var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)
