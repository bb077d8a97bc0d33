//go:build !quorumlock_multimutex

package safety_test

import (
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// newMultiMutex is nil until redlock.(*Redlock).NewMultiMutex exists on this
// branch: the chaos clients take a Mutex instead of a multi-name lock. Once
// it exists, delete this file and the build constraint of
// chaos_multi_test.go.
var newMultiMutex func(rs *redlock.Redlock, names []string, opts ...mutex.Option) *mutex.Mutex
