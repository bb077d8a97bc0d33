// Package firstlock is the first lock of a new quorumlock instance, as
// scenario 12 of the bench times it, shared by the bench and its FIPS
// 140-only child (fipsfirst), which must not import redsync: a dependency
// of redsync computes an MD5 at init, which FIPS 140-only mode refuses.
package firstlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// Quorumlock makes new go-redis clients (default options) to addrs and a
// new Redlock over them, takes and releases the lock name with TryLock and
// Unlock, and returns how long that took; the clients and the Redlock are
// closed after the clock stops.
func Quorumlock(ctx context.Context, addrs []string, name string) (time.Duration, error) {
	start := time.Now()
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
	}
	defer CloseAll(clients)
	rs, err := redlock.New(clients)
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	m := rs.NewMutex(name)
	if err := m.TryLockContext(ctx); err != nil {
		return 0, err
	}
	if err := m.UnlockContext(ctx); err != nil {
		return 0, fmt.Errorf("unlock: %w", err)
	}
	return time.Since(start), nil
}

// CloseAll closes clients.
func CloseAll(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}
