package redlock_test

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

// embeddedNodes starts n in-process Redis nodes for the examples and returns
// a client for each, and a function that stops everything. Real code passes
// clients for its own independent Redis primaries instead.
func embeddedNodes(n int) ([]redis.UniversalClient, func()) {
	var clients []redis.UniversalClient
	var stops []func()
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			panic(err)
		}
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		clients = append(clients, c)
		stops = append(stops, func() { _ = c.Close(); s.Close() })
	}
	return clients, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// embeddedURLs is embeddedNodes as the URLs NewFromURLs takes.
func embeddedURLs(n int) ([]string, func()) {
	clients, stop := embeddedNodes(n)
	urls := make([]string, n)
	for i, c := range clients {
		urls[i] = "redis://" + c.(*redis.Client).Options().Addr
	}
	return urls, stop
}

// The first call: one URL per independent Redis primary. NewFromURLs gives
// its clients the settings a lock wants (1s to dial and per read or write,
// no retries); Close releases the locks still held and closes the clients.
// README.md's first snippet is this one.
func ExampleNewFromURLs() {
	urls, stop := embeddedURLs(5) // e.g. "redis://10.0.0.1:6379", "rediss://user:pass@10.0.0.2:6380/0"
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rs, err := redlock.NewFromURLs(ctx, urls)
	if err != nil { // a malformed URL, or two reaching one server; nodes down are not an error
		fmt.Println(err)
		return
	}
	defer rs.Close()
	m := rs.NewMutex("orders:42", mutex.WithTTL(8*time.Second))
	if err := m.LockContext(ctx); err != nil {
		// errors.Is(err, mutex.ErrNotObtained); also ErrNodesUnavailable when
		// failing nodes, not another owner, prevented a majority.
		fmt.Println(err)
		return
	}
	// ... work that must finish before m.Until() ...
	switch err := m.UnlockContext(ctx); {
	case errors.Is(err, mutex.ErrNotHeld):
		// The lock expired or passed to someone else before the work ended:
		// it may have overlapped another owner's.
		fmt.Println(err)
	case errors.Is(err, mutex.ErrNodesUnavailable):
		// Too few nodes answered: m still holds the lock (its keys expire with
		// the TTL). Call UnlockContext again, or use a new Mutex for the next lock.
		fmt.Println(err)
	case err == nil:
		fmt.Println("released")
	}
	// Output: released
}

func ExampleNew() {
	clients, stop := embeddedNodes(5)
	defer stop()

	rs, err := redlock.New(clients, redlock.WithKeyPrefix("locks:"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("nodes:", len(rs.Nodes()), "majority:", rs.Quorum())
	// Output: nodes: 5 majority: 3
}

func ExampleRedlock_NewMutex() {
	clients, stop := embeddedNodes(5)
	defer stop()
	rs, err := redlock.New(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	m := rs.NewMutex("orders:42", mutex.WithTTL(8*time.Second))
	if err := m.LockContext(ctx); err != nil {
		fmt.Println("could not lock:", err)
		return
	}
	// The work must end before m.Until(); extend the lock if it needs longer.
	fmt.Println("locked", m.Name(), "for about", time.Until(m.Until()).Round(time.Second))

	if err := m.UnlockContext(ctx); err != nil {
		fmt.Println("unlock:", err)
	}
	// Output: locked orders:42 for about 8s
}

func ExampleRedlock_NewMutex_tryLock() {
	clients, stop := embeddedNodes(3)
	defer stop()
	rs, _ := redlock.New(clients)
	ctx := context.Background()

	first := rs.NewMutex("payment:7")
	_ = first.LockContext(ctx)
	defer first.UnlockContext(ctx)

	// A second request for the same payment: one attempt, no waiting.
	err := rs.NewMutex("payment:7").TryLockContext(ctx)
	switch {
	case errors.Is(err, mutex.ErrNodesUnavailable):
		fmt.Println("503: lock service unavailable")
	case errors.Is(err, mutex.ErrNotObtained):
		fmt.Println("409: payment already in progress")
	case err == nil:
		fmt.Println("200: processing")
	}
	// Output: 409: payment already in progress
}

func ExampleRedlock_NewMutex_nodeErrors() {
	clients, stop := embeddedNodes(3)
	stop() // every node is gone
	rs, _ := redlock.New(clients, redlock.WithNodeTimeout(50*time.Millisecond))

	err := rs.NewMutex("report").TryLockContext(context.Background())
	fmt.Println("not obtained:", errors.Is(err, mutex.ErrNotObtained))
	fmt.Println("nodes unavailable:", errors.Is(err, mutex.ErrNodesUnavailable))
	var nodeErr *mutex.NodeError
	fmt.Println("a node error is reachable:", errors.As(err, &nodeErr))
	// Output:
	// not obtained: true
	// nodes unavailable: true
	// a node error is reachable: true
}

func ExampleRedlock_NewSemaphore() {
	clients, stop := embeddedNodes(3)
	defer stop()
	rs, err := redlock.New(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	exports := rs.NewSemaphore("exports", 2, mutex.WithTTL(30*time.Second))
	first, err := exports.AcquireContext(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	second, _ := exports.TryAcquireContext(ctx)
	_, err = exports.TryAcquireContext(ctx)
	fmt.Println("third permit refused:", errors.Is(err, mutex.ErrNotObtained))
	for _, p := range []*mutex.Permit{first, second} {
		if err := p.ReleaseContext(ctx); err != nil {
			fmt.Println(err)
		}
	}
	// Output: third permit refused: true
}

func ExampleRedlock_NewRWMutex() {
	clients, stop := embeddedNodes(3)
	defer stop()
	rs, err := redlock.New(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	reader, other, writer := rs.NewRWMutex("catalog"), rs.NewRWMutex("catalog"), rs.NewRWMutex("catalog")
	if err := reader.RLockContext(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second reader:", other.TryRLockContext(ctx) == nil)
	fmt.Println("writer while read:", errors.Is(writer.TryLockContext(ctx), mutex.ErrNotObtained))
	_ = other.RUnlockContext(ctx)
	_ = reader.RUnlockContext(ctx)
	fmt.Println("writer after:", writer.TryLockContext(ctx) == nil)
	_ = writer.UnlockContext(ctx)
	// Output:
	// second reader: true
	// writer while read: true
	// writer after: true
}

func ExampleRedlock_NewMultiMutex() {
	clients, stop := embeddedNodes(3)
	defer stop()
	rs, err := redlock.New(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A transfer locks both accounts at once; another, in the opposite
	// order, can never deadlock with it.
	transfer := rs.NewMultiMutex([]string{"acct:7", "acct:3"})
	if err := transfer.LockContext(ctx); err != nil {
		fmt.Println(err)
		return
	}
	reverse := rs.NewMultiMutex([]string{"acct:3", "acct:7"})
	fmt.Println("reverse transfer refused:", errors.Is(reverse.TryLockContext(ctx), mutex.ErrNotObtained))
	fmt.Println("one account refused:", errors.Is(rs.NewMutex("acct:3").TryLockContext(ctx), mutex.ErrNotObtained))
	if err := transfer.UnlockContext(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("reverse after:", reverse.TryLockContext(ctx) == nil)
	_ = reverse.UnlockContext(ctx)
	// Output:
	// reverse transfer refused: true
	// one account refused: true
	// reverse after: true
}
