// Command semaphore shows a counting semaphore shared by the replicas of a
// service: every replica accepts export requests, but the database the
// exports read from can serve at most 3 of them at once, across the whole
// fleet. Each export first takes a permit of
// rs.NewSemaphore("exports", 3), waiting in AcquireContext while 3 others
// run, and gives it back when it is done. The permit is renewed in the
// background (mutex.WithAutoExtend) for as long as the export runs, and the
// export is cancelled if its permit is lost, so a replica never keeps
// reading beside 3 others. A replica that crashes keeps its permit only
// until its TTL runs out.
//
// The program runs 4 replicas, each with its own connections to the nodes
// as separate processes would have; each gets 3 export requests at once.
// It prints when each export got its permit and ran, and the most exports
// the database served at once:
//
//	go run ./examples/semaphore
//	go run ./examples/semaphore -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	// semaphoreName is the semaphore every replica shares, and limit its
	// permits: the most exports the database serves at once.
	semaphoreName = "exports"
	limit         = 3
	replicas      = 4
	perReplica    = 3 // export requests each replica gets at once
	// exportTime is how long one export runs; ttl is the permits' TTL,
	// renewed every third of it while the export runs.
	exportTime = 400 * time.Millisecond
	ttl        = 3 * time.Second
	// keyPrefix is put before every lock name to form its Redis key.
	keyPrefix = "semaphore:"
)

func main() {
	// go-redis logs every refused dial to stderr; the lock's errors already
	// name failed nodes, so keep only go-redis's other messages.
	redis.SetLogger(logging.NewBlacklistLogger([]string{"failed to dial", "changed by hook to CLOSED"}))
	nodes := demo.NodesFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "semaphore:", err)
		os.Exit(1)
	}
}

// summary is what a run found.
type summary struct {
	Results []exportResult // every export request, in the order they ended
	Peak    int            // the most exports the database served at once
	Served  int            // exports the database served
}

// run sends the export requests on the nodes at urls (embedded ones if
// empty), prints what happened, and returns an error unless every export
// ran to its end and the database never served more than limit at once.
func run(ctx context.Context, out io.Writer, urls string) (summary, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	list, stop, err := demo.URLs(urls, 5)
	if err != nil {
		return summary{}, err
	}
	defer stop()
	reps, closeAll, err := startReplicas(ctx, list, replicas)
	if err != nil {
		return summary{}, err
	}
	defer closeAll()
	fmt.Fprintf(out, "%d replicas, each with its own connections to %d lock nodes, get %d export requests each at once;\n"+
		"the database serves at most %d exports at a time: each takes a permit of the semaphore %q (TTL %v, renewed while it runs)\n\n",
		replicas, len(list), perReplica, limit, semaphoreName, ttl)

	db := &database{}
	started := time.Now()
	results := make(chan exportResult)
	var wg sync.WaitGroup
	for _, r := range reps {
		for e := 1; e <= perReplica; e++ {
			wg.Go(func() {
				results <- r.runExport(ctx, e, func(ctx context.Context) error { return db.serve(ctx, exportFor(exportTime)) })
			})
		}
	}
	go func() { wg.Wait(); close(results) }()
	var s summary
	var failures []string
	for res := range results {
		s.Results = append(s.Results, res)
		if res.Err != nil {
			fmt.Fprintf(out, "   replica %d, export %d: %v\n", res.Replica, res.Export, res.Err)
			failures = append(failures, fmt.Sprintf("replica %d, export %d: %v", res.Replica, res.Export, res.Err))
			continue
		}
		fmt.Fprintf(out, "   replica %d, export %d: waited %v for a permit, ran %v\n",
			res.Replica, res.Export, res.Waited.Round(10*time.Millisecond), res.Ran.Round(10*time.Millisecond))
	}
	s.Peak, s.Served = db.stats()
	waits := make([]time.Duration, 0, len(s.Results))
	for _, res := range s.Results {
		waits = append(waits, res.Waited)
	}
	fmt.Fprintf(out, "\nsummary: %d exports on %d replicas in %v, at most %d at once (limit %d); the longest wait for a permit was %v\n",
		s.Served, replicas, time.Since(started).Round(10*time.Millisecond), s.Peak, limit, slices.Max(waits).Round(10*time.Millisecond))
	switch {
	case len(failures) > 0:
		return s, errors.New(strings.Join(failures, "; "))
	case s.Peak > limit:
		return s, fmt.Errorf("the database served %d exports at once, over the limit of %d", s.Peak, limit)
	case s.Served != replicas*perReplica:
		return s, fmt.Errorf("the database served %d exports, want %d", s.Served, replicas*perReplica)
	}
	return s, nil
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
		reps[i] = newReplica(i+1, rs)
	}
	return reps, closeAll, nil
}
