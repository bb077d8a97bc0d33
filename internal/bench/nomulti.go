//go:build !quorumlock_multimutex

package main

import (
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// newMultiMutex is nil until redlock.(*Redlock).NewMultiMutex exists on this
// branch: scenario 10 leaves the multi-name lock out. Once it exists, delete
// this file and the build constraint of multi.go.
var newMultiMutex func(rs *redlock.Redlock, names []string, opts ...mutex.Option) *mutex.Mutex
