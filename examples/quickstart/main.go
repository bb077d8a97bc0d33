// Command quickstart shows quorumlock end to end with no setup: it starts five
// embedded Redis nodes in this process, lets several workers contend for one
// lock, then stops nodes one by one to show what a majority buys.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: go run ./examples/quickstart\n\nIt takes no flags: it runs on five embedded nodes of its own, since it\nstops some of them to show what a majority buys. The other examples\n(examples/README.md) take -nodes for real servers.")
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	// go-redis logs every failed dial; the lock reports them in its errors.
	logging.Disable()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// Five independent nodes. In production these are five Redis primaries
	// on separate machines, not replicas of one another.
	nodes := make([]*miniredis.Miniredis, 5)
	clients := make([]redis.UniversalClient, 5)
	for i := range nodes {
		nodes[i] = miniredis.NewMiniRedis()
		if err := nodes[i].Start(); err != nil {
			return err
		}
		defer nodes[i].Close()
		// One dial attempt and no client-side retries: a stopped node should
		// fail at once with its real error rather than be retried inside
		// go-redis until the lock's per-node timeout gives up on it.
		c := redis.NewClient(&redis.Options{Addr: nodes[i].Addr(), MaxRetries: -1, DialerRetries: 1})
		defer c.Close()
		clients[i] = c
	}
	rs, err := redlock.New(clients, redlock.WithKeyPrefix("quickstart:"))
	if err != nil {
		return err
	}
	fmt.Printf("started %d embedded nodes; a lock needs %d of them\n\n", len(clients), rs.Quorum())

	// 1. Several workers contend for one lock.
	const workers, rounds = 6, 5
	var inside, overlaps, turns atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			m := rs.NewMutex("report", mutex.WithTTL(5*time.Second))
			for range rounds {
				if err := m.LockContext(ctx); err != nil {
					log.Printf("worker %d: %v", w, err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				turns.Add(1)
				time.Sleep(2 * time.Millisecond) // the critical section
				inside.Add(-1)
				if err := m.UnlockContext(ctx); err != nil {
					log.Printf("worker %d: unlock: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("1. %d workers took the lock %d times in %v; overlapping critical sections: %d\n",
		workers, turns.Load(), time.Since(start).Round(time.Millisecond), overlaps.Load())

	// 2. Two of five nodes fail: three are still a majority.
	nodes[0].Close()
	nodes[1].Close()
	m := rs.NewMutex("report")
	t0 := time.Now()
	if err := m.LockContext(ctx); err != nil {
		return fmt.Errorf("with 3 of 5 nodes up: %w", err)
	}
	fmt.Printf("2. stopped 2 nodes: lock obtained in %v, valid for %v\n",
		time.Since(t0).Round(time.Millisecond), time.Until(m.Until()).Round(time.Millisecond))
	if err := m.UnlockContext(ctx); err != nil {
		return err
	}

	// 3. A third node fails: no majority is possible, and the error says why.
	nodes[2].Close()
	t0 = time.Now()
	err = rs.NewMutex("report").TryLockContext(ctx)
	fmt.Printf("3. stopped a 3rd node: TryLockContext failed in %v\n", time.Since(t0).Round(time.Millisecond))
	fmt.Printf("   errors.Is(err, mutex.ErrNotObtained)      = %v\n", errors.Is(err, mutex.ErrNotObtained))
	fmt.Printf("   errors.Is(err, mutex.ErrNodesUnavailable) = %v\n", errors.Is(err, mutex.ErrNodesUnavailable))
	var nodeErr *mutex.NodeError
	if errors.As(err, &nodeErr) {
		fmt.Printf("   first failed node: %s\n", nodeErr.Node)
	}
	fmt.Printf("   err: %v\n\n", err)

	fmt.Printf("summary: %d acquisitions, %d overlaps; locking survived 2 of 5 nodes down and refused clearly at 3\n",
		turns.Load()+1, overlaps.Load())
	if overlaps.Load() != 0 || !errors.Is(err, mutex.ErrNodesUnavailable) {
		return errors.New("unexpected outcome")
	}
	return nil
}
