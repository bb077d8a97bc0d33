package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Scenarios 10 and 11 measure quorumlock's other primitives (issue 13):
// each acquire+release uncontended, next to the Mutex, and a semaphore
// contended by workers in separate processes. redsync has none of them.
const (
	// semaphoreLimit is the limit of the semaphores of both scenarios.
	semaphoreLimit = 4
	// semaphoreProcs is the number of contender processes of scenario 11;
	// they share settings.workers.
	semaphoreProcs = 4
	// maxPrimitiveVsMutex is the target of scenario 10: p50 of a
	// semaphore's first free permit, a read lock and a two-name multi-lock,
	// each at most this × the Mutex's.
	maxPrimitiveVsMutex = 1.3
)

// The primitives of scenario 10, in the order of its table; the Mutex is
// first, the reference.
const (
	primMutex = iota
	primPermit
	primRead
	primWrite
	primMulti
)

var primitiveNames = []string{
	primMutex:  "mutex",
	primPermit: "semaphore permit",
	primRead:   "read lock",
	primWrite:  "write lock",
	primMulti:  "multi-lock, 2 names",
}

// primitiveMakers returns a lock maker per primitive over rs, in the order
// of primitiveNames.
func primitiveMakers(rs *redlock.Redlock) []lockMaker {
	return []lockMaker{
		primMutex:  func(n string) locker { return quorumLock{rs.NewMutex(n)} },
		primPermit: func(n string) locker { return &permitLock{s: rs.NewSemaphore(n, semaphoreLimit)} },
		primRead:   func(n string) locker { return readLock{rs.NewRWMutex(n)} },
		primWrite:  func(n string) locker { return writeLock{rs.NewRWMutex(n)} },
		primMulti:  func(n string) locker { return quorumLock{rs.NewMultiMutex([]string{n + ":a", n + ":b"})} },
	}
}

// errNoPermit is the Unlock of a permitLock that holds no permit.
var errNoPermit = errors.New("semaphore: no permit held")

// permitLock adapts a *mutex.Semaphore: Lock acquires a permit
// (AcquireContext), Unlock releases it. Not safe for concurrent use.
type permitLock struct {
	s *mutex.Semaphore
	p *mutex.Permit
}

func (l *permitLock) Lock(ctx context.Context) error {
	p, err := l.s.AcquireContext(ctx)
	if err != nil {
		return err
	}
	l.p = p
	return nil
}

func (l *permitLock) Unlock(ctx context.Context) error {
	p := l.p
	l.p = nil
	if p == nil {
		return errNoPermit
	}
	return p.ReleaseContext(ctx)
}

// readLock and writeLock adapt a *mutex.RWMutex's read and write locks.
type (
	readLock  struct{ rw *mutex.RWMutex }
	writeLock struct{ rw *mutex.RWMutex }
)

func (l readLock) Lock(ctx context.Context) error    { return l.rw.RLockContext(ctx) }
func (l readLock) Unlock(ctx context.Context) error  { return l.rw.RUnlockContext(ctx) }
func (l writeLock) Lock(ctx context.Context) error   { return l.rw.LockContext(ctx) }
func (l writeLock) Unlock(ctx context.Context) error { return l.rw.UnlockContext(ctx) }

// runPrimitives runs those of scenarios 10 to 12 that s chooses, in order,
// printing their lines.
func runPrimitives(ctx context.Context, out io.Writer, addrs []string, s settings, r *report) (err error) {
	if s.run.has(10) {
		if r.Primitives, err = primitivesScenario(ctx, addrs, s); err != nil {
			return fmt.Errorf("primitives: %w", err)
		}
		printLatency(out, "primitives", "acquire+release", primitiveNames, r.Primitives)
	}
	if s.run.has(11) {
		if r.Semaphore, err = semaphoreScenario(ctx, addrs, s); err != nil {
			return fmt.Errorf("contended semaphore: %w", err)
		}
		printSemaphore(out, r.Semaphore)
	}
	if s.run.has(12) {
		if r.FirstLock, err = firstLockScenario(ctx, addrs, s); err != nil {
			return fmt.Errorf("first lock: %w", err)
		}
		printLatency(out, "first lock", "new instance, TryLock+Unlock", firstLockNames, r.FirstLock)
	}
	return nil
}

// primitivesScenario is scenario 10: sequential acquire+release of each
// primitive, uncontended, on one Redlock with clients of its own, each
// primitive on a name of its own, in turns of s.primitiveChunk interleaved
// forward then backward (as scenario 1 does for the libraries).
func primitivesScenario(ctx context.Context, addrs []string, s settings) ([]latencyResult, error) {
	lib, err := newLoadLib(loadQuorumlock, addrs)
	if err != nil {
		return nil, err
	}
	defer lib.Close()
	var prims []*library
	for i, mk := range primitiveMakers(lib.rl) {
		prims = append(prims, &library{name: primitiveNames[i], direct: mk})
	}
	return sequential(ctx, prims, false, "bench:primitives:", s.primitiveIterations, s.primitiveChunk, onSlot(lockUnlock))
}

// semaphoreScenario is scenario 11: settings.workers workers in
// semaphoreProcs contender processes take permits of one semaphore of
// limit semaphoreLimit, each looping as in scenario 6, for s.semaphoreFor.
func semaphoreScenario(ctx context.Context, addrs []string, s settings) (procsResult, error) {
	self, err := os.Executable()
	if err != nil {
		return procsResult{}, err
	}
	s.procsFor = s.semaphoreFor
	return runContenders(ctx, self, loadQuorumlock, addrs, "bench:semaphore", semaphoreLimit, semaphoreProcs, s)
}
