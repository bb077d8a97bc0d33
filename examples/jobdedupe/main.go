// Command jobdedupe shows a scheduled job deduplicated across the replicas of
// a service: every replica runs the same scheduler, so at each tick all of
// them start the job at the same moment, and the lock lets exactly one run
// it. The lock is named after the tick (job:nightly-report:<tick>) so the job
// runs once per tick, and it is taken with rs.Do, which renews it for as long
// as the job runs (the job here takes 1s, over three times the lock's 300ms
// TTL) and cancels the job's ctx if the lock is lost, so that a replica never
// keeps working on a job another one may have started.
//
// The program runs 3 replicas, each with its own connections to the nodes as
// separate processes would have, for 3 ticks, and prints which replica ran
// each tick:
//
//	go run ./examples/jobdedupe
//	go run ./examples/jobdedupe -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//
// Without -nodes it uses 5 embedded Redis nodes started in the process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	replicas = 3
	ticks    = 3
	// ttl is the lock's TTL, and jobTime how long the job runs: much longer,
	// so only renewal keeps the lock alive until the job ends.
	ttl     = time.Second
	jobTime = 3500 * time.Millisecond
	// keyPrefix is put before every lock name to form its Redis key.
	keyPrefix = "jobdedupe:"
)

func main() {
	// go-redis logs every refused dial to stderr; the lock's errors already
	// name failed nodes, so keep only go-redis's other messages.
	redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial", "changed by hook to CLOSED"}))
	nodes := demo.NodesFlag()
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "jobdedupe:", err)
		os.Exit(1)
	}
}

// run plays the ticks on the nodes at urls (embedded ones if empty), prints
// who ran each, and returns an error unless exactly one replica ran the job
// each tick, to its end, with the lock kept past its TTL.
func run(ctx context.Context, out io.Writer, urls string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	list, stop, err := demo.URLs(urls, 5)
	if err != nil {
		return err
	}
	defer stop()
	reps, closeAll, err := startReplicas(ctx, list, replicas)
	if err != nil {
		return err
	}
	defer closeAll()
	fmt.Fprintf(out, "%d replicas, each with its own connections to %d lock nodes; the job takes %v, the lock's TTL is %v (renewed every %v while the job runs)\n\n",
		replicas, len(list), jobTime, ttl, ttl/3)

	var failures []string
	for tick := 1; tick <= ticks; tick++ {
		results := runTick(ctx, reps, tick, ttl, nightlyReport(jobTime))
		fmt.Fprintf(out, "tick %d (%s)\n", tick, jobName(tick))
		ran := 0
		for _, r := range results {
			switch {
			case r.Ran && r.Err == nil:
				ran++
				fmt.Fprintf(out, "   replica %d ran the job: %v, %.1f TTLs, the lock renewed all along\n", r.Replica, r.Took.Round(10*time.Millisecond), float64(r.Took)/float64(ttl))
				if r.Took < ttl {
					failures = append(failures, fmt.Sprintf("tick %d: the job took %v, not longer than the TTL", tick, r.Took))
				}
			case r.Ran:
				ran++
				fmt.Fprintf(out, "   replica %d ran the job, which failed: %v\n", r.Replica, r.Err)
				failures = append(failures, fmt.Sprintf("tick %d: replica %d: %v", tick, r.Replica, r.Err))
			case r.Skipped():
				fmt.Fprintf(out, "   replica %d skipped it: another replica holds the lock\n", r.Replica)
			default:
				fmt.Fprintf(out, "   replica %d did not run it: %v\n", r.Replica, r.Err)
			}
		}
		if ran != 1 {
			failures = append(failures, fmt.Sprintf("tick %d: %d replicas ran the job, want exactly 1", tick, ran))
		}
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	fmt.Fprintf(out, "\nsummary: %d ticks, each run by exactly one of %d replicas; every run lasted over 3 TTLs without losing the lock\n", ticks, replicas)
	return nil
}

// startReplicas starts n replicas over the nodes at urls, each with its own
// connections, and returns them with a function that closes them all.
func startReplicas(ctx context.Context, urls []string, n int) ([]*replica, func(), error) {
	sets, closeAll, err := demo.OpenEach(ctx, urls, n, redlock.WithKeyPrefix(keyPrefix))
	if err != nil {
		return nil, nil, err
	}
	reps := make([]*replica, n)
	for i, rs := range sets {
		reps[i] = &replica{id: i + 1, rs: rs}
	}
	return reps, closeAll, nil
}
