//go:build quorumlock_multimutex

package safety_test

import "github.com/quorumlock/quorumlock/redlock"

// newMultiMutex is the multi-name lock the chaos clients take.
var newMultiMutex = (*redlock.Redlock).NewMultiMutex
