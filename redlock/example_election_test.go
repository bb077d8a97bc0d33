package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A candidate leads until it resigns; any process with the node set, here a
// watcher that never campaigns, reads and observes who leads.
func ExampleRedlock_NewElection() {
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

	e := rs.NewElection("scheduler", mutex.WithTTL(5*time.Second))
	watcher := rs.NewElection("scheduler")
	changes := watcher.Observe(ctx)
	fmt.Printf("at first: %+v\n", <-changes) // nobody leads

	if err := e.Campaign(ctx, "host-a"); err != nil {
		fmt.Println("campaign:", err)
		return
	}
	l, err := watcher.Leader(ctx)
	fmt.Println("leader:", l.Value, l.FencingToken > 0, err)
	if err := e.Proclaim(ctx, "host-a:v2"); err != nil {
		fmt.Println("proclaim:", err)
	}
	for l := range changes {
		if l.Value == "host-a:v2" {
			fmt.Println("observed:", l.Value)
			break
		}
	}
	if err := e.Resign(ctx); err != nil {
		fmt.Println("resign:", err)
	}
	<-e.Done()
	_, err = watcher.Leader(ctx)
	fmt.Println("after Resign:", errors.Is(err, mutex.ErrNoLeader))
	// Output:
	// at first: {Value: FencingToken:0}
	// leader: host-a true <nil>
	// observed: host-a:v2
	// after Resign: true
}
