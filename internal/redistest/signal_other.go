//go:build !unix

package redistest

import "os"

// sigStop and sigCont are nil where processes cannot be stopped and
// continued with signals; Pause and Resume then fail the test.
var (
	sigStop os.Signal
	sigCont os.Signal
)
