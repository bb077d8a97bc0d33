//go:build quorumlock_multimutex

package main

import "github.com/quorumlock/quorumlock/redlock"

// newMultiMutex is the multi-name lock of scenario 10.
var newMultiMutex = (*redlock.Redlock).NewMultiMutex
