package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// ExampleMutex_ExtendContext keeps a lock for work that may outlast one TTL,
// extending it before Until and stopping if it cannot.
func ExampleMutex_ExtendContext() {
	s := miniredis.NewMiniRedis()
	_ = s.Start()
	defer s.Close()
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	rs, _ := redlock.New([]redis.UniversalClient{client})
	ctx := context.Background()

	m := rs.NewMutex("nightly-report", mutex.WithTTL(10*time.Second))
	if err := m.LockContext(ctx); err != nil {
		fmt.Println("lock:", err)
		return
	}
	defer func() {
		// Check the release: ErrNotHeld means the lock expired or passed
		// to another owner before the work ended.
		if err := m.UnlockContext(ctx); errors.Is(err, mutex.ErrNotHeld) {
			fmt.Println("unlock: the work may have overlapped another owner's")
		}
	}()

	for step := range 3 {
		// ... one step of the work, well inside m.Until() ...
		if err := m.ExtendContext(ctx); err != nil {
			if errors.Is(err, mutex.ErrNotHeld) {
				fmt.Println("lost the lock; stopping at step", step)
			}
			return
		}
	}
	fmt.Println("done; still valid:", time.Until(m.Until()) > 9*time.Second)
	// Output: done; still valid: true
}

// ExampleMutex_UnlockContext shows what Unlock reports when the lock expired
// while the work ran and another owner took it.
func ExampleMutex_UnlockContext() {
	s := miniredis.NewMiniRedis()
	_ = s.Start()
	defer s.Close()
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	rs, _ := redlock.New([]redis.UniversalClient{client})
	ctx := context.Background()

	m := rs.NewMutex("job", mutex.WithTTL(time.Second))
	_ = m.LockContext(ctx)
	s.FastForward(2 * time.Second) // the work took longer than the TTL...
	other := rs.NewMutex("job")
	_ = other.LockContext(ctx) // ...and someone else got the lock

	if err := m.UnlockContext(ctx); errors.Is(err, mutex.ErrNotHeld) {
		fmt.Println("lost the lock before unlocking: the work may have overlapped")
	}
	// Output: lost the lock before unlocking: the work may have overlapped
}
