package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The libraries of the load scenarios (6 to 9): quorumlock and redsync with
// default options, each built anew on clients of its own, as a service
// replica or a serverless instance would.
const (
	loadQuorumlock = iota
	loadRedsync
	numLoadLibs
)

// loadNames are the load libraries' names, by index.
var loadNames = [numLoadLibs]string{loadQuorumlock: "quorumlock", loadRedsync: "redsync"}

// loadLock is one lock of a load scenario. ttl 0 is the library's default.
type loadLock interface {
	locker
	TryLock(ctx context.Context) error
}

// loadLib is one library instance (one quorumlock Redlock or one redsync
// value) with its own go-redis clients, one per node (default options).
type loadLib struct {
	kind    int
	clients []*redis.Client
	rl      *redlock.Redlock // quorumlock only
	rs      *redsync.Redsync // redsync only
}

// newLoadLib builds library kind on new clients to addrs. Nothing is dialed.
func newLoadLib(kind int, addrs []string) (*loadLib, error) {
	l := &loadLib{kind: kind}
	for _, a := range addrs {
		l.clients = append(l.clients, redis.NewClient(&redis.Options{Addr: a}))
	}
	switch kind {
	case loadQuorumlock:
		rl, err := redlock.New(universal(l.clients))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("quorumlock: %w", err), l.Close())
		}
		l.rl = rl
	case loadRedsync:
		l.rs = redsync.New(pools(l.clients)...)
	default:
		return nil, errors.Join(fmt.Errorf("unknown library %d", kind), l.Close())
	}
	return l, nil
}

// newLock returns a lock on name with TTL ttl (0: the library's default, 8s
// for both) and, for quorumlock, the extra options.
func (l *loadLib) newLock(name string, ttl time.Duration, opts ...mutex.Option) loadLock {
	if l.rl != nil {
		if ttl > 0 {
			opts = append(opts, mutex.WithTTL(ttl))
		}
		return quorumLoadLock{quorumLock{l.rl.NewMutex(name, opts...)}}
	}
	var ro []redsync.Option
	if ttl > 0 {
		ro = append(ro, redsync.WithExpiry(ttl))
	}
	return redsyncLoadLock{redsyncLock{l.rs.NewMutex(name, ro...)}}
}

type quorumLoadLock struct{ quorumLock }

func (q quorumLoadLock) TryLock(ctx context.Context) error { return q.m.TryLockContext(ctx) }

type redsyncLoadLock struct{ redsyncLock }

func (r redsyncLoadLock) TryLock(ctx context.Context) error { return r.m.TryLockContext(ctx) }

// warm dials conns connections on every client (a PING on each, all at
// once), so that a scenario measures warm pools. conns above a client's pool
// size just reuses connections.
func (l *loadLib) warm(ctx context.Context, conns int) error {
	errs := make(chan error, len(l.clients)*conns)
	for _, c := range l.clients {
		for range conns {
			go func() { errs <- c.Ping(ctx).Err() }()
		}
	}
	var all []error
	for range len(l.clients) * conns {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// Close closes the library: the Redlock (quorumlock), then its clients.
func (l *loadLib) Close() error {
	var errs []error
	if l.rl != nil {
		errs = append(errs, l.rl.Close())
	}
	for _, c := range l.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
