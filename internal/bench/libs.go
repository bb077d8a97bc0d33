package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The libraries, in the order of every table, chart and slice of results.
const (
	libQuorumlock = iota
	libRedsync
	libFailFast
	libFloor
	numLibs
)

// floorTTL is the PX of the raw floor's SET: the 8s default TTL of both
// libraries, so every implementation sends the same expiry.
const floorTTL = 8 * time.Second

// pollFloorName is the name of the raw floor in the contended scenario, where
// it retries every millisecond (see library.polling).
const pollFloorName = "raw-floor(1ms-poll)"

// locker is one lock on one name, as the scenarios drive it. Each worker gets
// its own. Lock returns nil once the lock is held; Unlock returns nil once a
// majority released it.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// lockMaker returns a new locker on name.
type lockMaker func(name string) locker

// library is one lock implementation with its own go-redis clients (default
// options) to the five nodes, created once for the whole run.
type library struct {
	name string
	// direct makes locks over the five nodes, each dialed directly.
	direct lockMaker
	// slowed makes locks over the same nodes, but with node 0 reached
	// through the slow proxy (by a client of this library's own).
	slowed lockMaker
	// polling, when not nil, replaces direct in the contended scenario,
	// under pollingName: the raw floor has no retry of its own.
	polling     lockMaker
	pollingName string
	clients     []*redis.Client // every client the library owns, for Close
}

// contender returns the name and the lock maker the contended scenario uses.
func (l *library) contender() (string, lockMaker) {
	if l.polling != nil {
		return l.pollingName, l.polling
	}
	return l.name, l.direct
}

// Close closes the library's clients. Call it after its last lock call.
func (l *library) Close() error {
	var errs []error
	for _, c := range l.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// newLibraries returns the four libraries, in the order of the lib*
// constants, each with its own clients: one per node in addrs, plus one to
// slowAddr that replaces node 0 in its slowed node set. Nothing is dialed yet.
func newLibraries(addrs []string, slowAddr string) ([]*library, error) {
	makers := []func(direct, slowed []*redis.Client) (*library, error){
		libQuorumlock: newQuorumlock,
		libRedsync:    func(d, s []*redis.Client) (*library, error) { return newRedsync("redsync", d, s), nil },
		libFailFast: func(d, s []*redis.Client) (*library, error) {
			return newRedsync("redsync-failfast", d, s, redsync.WithFailFast(true)), nil
		},
		libFloor: func(d, s []*redis.Client) (*library, error) { return newFloor(d, s), nil },
	}
	libs := make([]*library, 0, len(makers))
	for _, build := range makers {
		direct := make([]*redis.Client, len(addrs))
		for i, addr := range addrs {
			direct[i] = redis.NewClient(&redis.Options{Addr: addr})
		}
		slowed := append([]*redis.Client{redis.NewClient(&redis.Options{Addr: slowAddr})}, direct[1:]...)
		lib, err := build(direct, slowed)
		if err != nil {
			for _, c := range append(direct, slowed[0]) {
				_ = c.Close()
			}
			return nil, errors.Join(err, closeLibraries(libs))
		}
		lib.clients = append(direct, slowed[0])
		libs = append(libs, lib)
	}
	return libs, nil
}

// closeLibraries closes every library's clients.
func closeLibraries(libs []*library) error {
	var errs []error
	for _, l := range libs {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// newQuorumlock is this library with default options: redlock.New(clients)
// and rs.NewMutex(name), so an 8s TTL.
func newQuorumlock(direct, slowed []*redis.Client) (*library, error) {
	rs, err := redlock.New(universal(direct))
	if err != nil {
		return nil, fmt.Errorf("quorumlock: %w", err)
	}
	rsSlow, err := redlock.New(universal(slowed))
	if err != nil {
		return nil, fmt.Errorf("quorumlock (slowed set): %w", err)
	}
	return &library{
		name:   "quorumlock",
		direct: func(name string) locker { return quorumLock{rs.NewMutex(name)} },
		slowed: func(name string) locker { return quorumLock{rsSlow.NewMutex(name)} },
	}, nil
}

func universal(clients []*redis.Client) []redis.UniversalClient {
	u := make([]redis.UniversalClient, len(clients))
	for i, c := range clients {
		u[i] = c
	}
	return u
}

// quorumLock adapts a *mutex.Mutex.
type quorumLock struct{ m *mutex.Mutex }

func (q quorumLock) Lock(ctx context.Context) error   { return q.m.LockContext(ctx) }
func (q quorumLock) Unlock(ctx context.Context) error { return q.m.UnlockContext(ctx) }

// newRedsync is redsync v4 over its go-redis v9 pools, with default options
// plus opts for every mutex: redsync.New(pools...), rs.NewMutex(name, opts...).
func newRedsync(name string, direct, slowed []*redis.Client, opts ...redsync.Option) *library {
	rs, rsSlow := redsync.New(pools(direct)...), redsync.New(pools(slowed)...)
	return &library{
		name:   name,
		direct: func(n string) locker { return redsyncLock{rs.NewMutex(n, opts...)} },
		slowed: func(n string) locker { return redsyncLock{rsSlow.NewMutex(n, opts...)} },
	}
}

func pools(clients []*redis.Client) []redsyncredis.Pool {
	p := make([]redsyncredis.Pool, len(clients))
	for i, c := range clients {
		p[i] = goredis.NewPool(c)
	}
	return p
}

// errNotReleased reports an UnlockContext of redsync that answered false
// without an error.
var errNotReleased = errors.New("redsync: unlock not confirmed by a majority")

// redsyncLock adapts a *redsync.Mutex.
type redsyncLock struct{ m *redsync.Mutex }

func (r redsyncLock) Lock(ctx context.Context) error { return r.m.LockContext(ctx) }

func (r redsyncLock) Unlock(ctx context.Context) error {
	ok, err := r.m.UnlockContext(ctx)
	switch {
	case ok:
		return nil // a minority may have failed: released all the same
	case err != nil:
		return err
	}
	return errNotReleased
}

// releaseScript is the token-checked release of the raw floor.
var releaseScript = redis.NewScript(`if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) end return 0`)

// Errors of the raw floor.
var (
	errFloorNotObtained = errors.New("raw-floor: lock not obtained: no majority")
	errFloorNotHeld     = errors.New("raw-floor: unlock: no majority released the token")
)

// floor is the raw floor: the least any quorum lock on go-redis must do.
type floor struct {
	clients []*redis.Client
}

// newFloor builds the raw floor on the clients: one round trip per node per
// operation, sent in parallel, waiting for every reply. Its contended variant
// polls every millisecond.
func newFloor(direct, slowed []*redis.Client) *library {
	d, s := &floor{clients: direct}, &floor{clients: slowed}
	return &library{
		name:        "raw-floor",
		direct:      func(name string) locker { return &floorLock{floor: d, key: name} },
		slowed:      func(name string) locker { return &floorLock{floor: s, key: name} },
		polling:     func(name string) locker { return &floorLock{floor: d, key: name, poll: time.Millisecond} },
		pollingName: pollFloorName,
	}
}

// floorLock is a lock of the raw floor. Lock sends SET key token NX PX 8000
// to all nodes in parallel, one goroutine each, waits for all replies, and
// succeeds iff a majority said OK; a failed attempt releases the token where
// it was set, so that it never blocks others until the TTL. Unlock sends the
// token-checked release script to all nodes in parallel and waits for all.
// No retries (unless poll > 0: then Lock sleeps poll between failed attempts
// until ctx is done), no drift, no validity. Not safe for concurrent use.
type floorLock struct {
	floor *floor
	key   string
	poll  time.Duration
	token string
}

func (l *floorLock) Lock(ctx context.Context) error {
	for {
		err := l.try(ctx)
		if err == nil || l.poll == 0 {
			return err
		}
		t := time.NewTimer(l.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// try makes one attempt under a fresh token.
func (l *floorLock) try(ctx context.Context) error {
	token := rand.Text()
	ok := l.floor.all(nil, func(c *redis.Client) bool {
		return c.Do(ctx, "SET", l.key, token, "NX", "PX", floorTTL.Milliseconds()).Val() == "OK"
	})
	if majority(ok) {
		l.token = token
		return nil
	}
	l.floor.release(ctx, l.key, token, ok) // undo the minority that said OK
	return errFloorNotObtained
}

func (l *floorLock) Unlock(ctx context.Context) error {
	released := l.floor.release(ctx, l.key, l.token, nil)
	l.token = ""
	if !majority(released) {
		return errFloorNotHeld
	}
	return nil
}

// release runs the release script with token on every node where only is
// true (every node if only is nil), in parallel, and reports which released.
// It is sent even when ctx is done: a cancelled caller must not leave its
// keys behind until their TTL.
func (f *floor) release(ctx context.Context, key, token string, only []bool) []bool {
	ctx = context.WithoutCancel(ctx)
	keys := []string{key}
	return f.all(only, func(c *redis.Client) bool {
		return releaseScript.Run(ctx, c, keys, token).Val() == int64(1)
	})
}

// all runs call on every client (those where only is true, if only is not
// nil) in a goroutine each, waits for all of them, and returns their answers
// by node.
func (f *floor) all(only []bool, call func(*redis.Client) bool) []bool {
	ok := make([]bool, len(f.clients))
	var wg sync.WaitGroup
	for i, c := range f.clients {
		if only != nil && !only[i] {
			continue
		}
		wg.Go(func() { ok[i] = call(c) })
	}
	wg.Wait()
	return ok
}

// majority reports whether more than half of the votes are true.
func majority(votes []bool) bool {
	n := 0
	for _, v := range votes {
		if v {
			n++
		}
	}
	return n > len(votes)/2
}
