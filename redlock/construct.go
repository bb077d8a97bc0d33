package redlock

import (
	"context"

	"github.com/quorumlock/quorumlock/internal/construct"
	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/mutex"
)

// mutex's unexported constructors, which package mutex's init func (run
// before this package's variables are initialized) registers in package
// construct. Given a nil set, the lock they return reports mutex.ErrInvalid.
var (
	newMutex      = construct.Mutex.(func(set *engine.Set, name string, opts ...mutex.Option) *mutex.Mutex)
	newElection   = construct.Election.(func(set *engine.Set, name string, opts ...mutex.Option) *mutex.Election)
	newRWMutex    = construct.RWMutex.(func(set *engine.Set, name string, opts ...mutex.Option) *mutex.RWMutex)
	newMultiMutex = construct.MultiMutex.(func(set *engine.Set, names []string, opts ...mutex.Option) *mutex.Mutex)
	newSemaphore  = construct.Semaphore.(func(set *engine.Set, name string, limit int, opts ...mutex.Option) *mutex.Semaphore)
	newResumed    = construct.ResumeMutex.(func(ctx context.Context, set *engine.Set, handle string, opts ...mutex.Option) (*mutex.Mutex, error))
)

// init hands package idempotency the node set of a Redlock, without
// exporting it (see construct.NodeSet).
func init() { construct.NodeSet = (*Redlock).nodeSet }

// nodeSet returns r's node set; nil for a nil r.
func (r *Redlock) nodeSet() *engine.Set {
	if r == nil {
		return nil
	}
	return r.set
}
