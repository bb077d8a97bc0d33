// Command leader shows leader election with mutex.Election: every candidate
// campaigns on "leader" and, once elected, leads until it resigns or loses
// the leadership (Done). The Election renews it while the leader lives, so
// the TTL does not limit how long it leads; it only bounds how long the
// others wait when the leader dies without resigning. An observer that never
// campaigns prints every change of leader (Observe).
//
// The program starts 3 candidates and the observer, each with its own
// connections to the nodes as separate processes would have. It lets the
// leader lead for a while, crashes it (its connections close; it neither
// renews nor resigns), shows that another candidate takes over within about
// one TTL, does it once more, and checks that there was never more than one
// leader at a time and that the observer saw each, fencing tokens rising:
//
//	go run ./examples/leader
//	go run ./examples/leader -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//
// Without -nodes it uses 5 embedded Redis nodes started in the process.
//
// To watch an election among real processes, start one candidate per
// terminal with the same nodes, and an observer, then kill the leader
// (kill -9 <pid>):
//
//	go run ./examples/leader -candidate 1 -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
//	go run ./examples/leader -observe -nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9/logging"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	candidates = 3
	crashes    = 2
	// leaderName is the election's name.
	leaderName = "leader"
	// ttl is the leadership's TTL: how long a dead leader's outlives its last
	// renewal.
	ttl = 500 * time.Millisecond
	// takeoverBound is the longest the program accepts between a crash and the
	// next leader: one TTL for the lock to expire, plus generous slack.
	takeoverBound = 3 * ttl
)

func main() {
	// go-redis logs every refused dial to stderr, which a node restart makes
	// noisy; the lock reports failed nodes in its own errors.
	logging.Disable()
	nodes := demo.NodesFlag()
	id := flag.Int("candidate", 0, "run one candidate, numbered id, as this process (needs -nodes); 0: the whole demo in one process")
	observe := flag.Bool("observe", false, "run an observer as this process, printing every change of leader (needs -nodes)")
	flag.Parse()
	if *id != 0 || *observe {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		var err error
		if *observe {
			err = runObserver(ctx, os.Stdout, *nodes)
		} else {
			err = runCandidate(ctx, os.Stdout, *nodes, *id)
		}
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "leader:", err)
			os.Exit(1)
		}
		return
	}
	if _, err := run(context.Background(), os.Stdout, *nodes); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

// report is what happened during the election.
type report struct {
	Terms       []term          // in the order they started
	MostLeaders int             // the most candidates acting as leader at once
	Takeovers   []time.Duration // from each crash to the next leader's start
	Observed    []mutex.Leader  // what the observer saw, vacancies left out
}

// run plays the election on the nodes at urls (embedded ones if empty),
// prints it to out, and returns what happened, with an error if two
// candidates ever led at once or a takeover took longer than takeoverBound.
func run(ctx context.Context, out io.Writer, urls string) (report, error) {
	var rep report
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	list, stop, err := demo.URLs(urls, 5)
	if err != nil {
		return rep, err
	}
	defer stop()

	cands := make([]*candidate, 0, candidates)
	defer func() {
		for _, c := range cands {
			c.closeAll()
		}
	}()
	for id := 1; id <= candidates; id++ {
		rs, die, closeAll, err := demo.OpenCrashable(list, redlock.WithKeyPrefix("leader-demo:"))
		if err != nil {
			return rep, err
		}
		cands = append(cands, &candidate{id: id, rs: rs, crash: make(chan struct{}), die: die, closeAll: closeAll})
	}
	fmt.Fprintf(out, "%d candidates and an observer, each with its own connections to %d lock nodes; leadership TTL %v, renewed every %v\n\n",
		candidates, len(list), ttl, (ttl / 3).Round(time.Millisecond))
	watcher, _, closeWatcher, err := demo.OpenCrashable(list, redlock.WithKeyPrefix("leader-demo:"))
	if err != nil {
		return rep, err
	}
	defer closeWatcher()

	t0 := time.Now()
	at := func(t time.Time) string { return fmt.Sprintf("t=%5dms", t.Sub(t0).Milliseconds()) }
	rec := newRecord()
	campaigns, endCampaigns := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var observed []mutex.Leader // read once wg is done
	wg.Go(func() {
		for l := range newElection(watcher).Observe(campaigns) {
			fmt.Fprintf(out, "%s  observer: %s\n", at(time.Now()), describe(l))
			if l != (mutex.Leader{}) {
				observed = append(observed, l)
			}
		}
	})
	for _, c := range cands {
		wg.Go(func() { c.campaign(campaigns, rec) })
	}
	defer func() { // also on early returns
		endCampaigns()
		wg.Wait()
	}()
	next := func(within time.Duration) (term, error) {
		select {
		case t := <-rec.elected:
			return t, nil
		case <-time.After(within):
			return term{}, fmt.Errorf("no leader elected within %v", within)
		case <-ctx.Done():
			return term{}, ctx.Err()
		}
	}

	leader, err := next(10 * time.Second)
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "%s  candidate %d is the leader\n", at(leader.Start), leader.Candidate)
	for range crashes {
		// The leader leads for 3 TTLs: only the renewals keep its lock.
		select {
		case <-time.After(3 * ttl):
		case <-ctx.Done():
			return rep, ctx.Err()
		}
		crashAt := time.Now()
		close(cands[leader.Candidate-1].crash)
		fmt.Fprintf(out, "%s  candidate %d crashes: it stops renewing and never resigns\n", at(crashAt), leader.Candidate)
		if leader, err = next(10 * time.Second); err != nil {
			return rep, err
		}
		takeover := leader.Start.Sub(crashAt)
		rep.Takeovers = append(rep.Takeovers, takeover)
		fmt.Fprintf(out, "%s  candidate %d is the leader, %v after the crash (the dead leader's leadership had to expire)\n",
			at(leader.Start), leader.Candidate, takeover.Round(time.Millisecond))
	}
	select {
	case <-time.After(ttl):
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	fmt.Fprintf(out, "%s  stopping: candidate %d steps down and resigns\n", at(time.Now()), leader.Candidate)
	endCampaigns()
	wg.Wait()

	rep.Terms, rep.MostLeaders, rep.Observed = rec.snapshot(), int(rec.most.Load()), observed
	fmt.Fprintf(out, "\nterms:\n")
	for _, t := range rep.Terms {
		fmt.Fprintf(out, "   candidate %d led from %s to %s (%s)\n", t.Candidate, at(t.Start), at(t.End), t.How)
	}
	if err := check(rep); err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "\nsummary: %d terms, never more than %d leader at a time; after each crash a new leader within %v (TTL %v)\n",
		len(rep.Terms), rep.MostLeaders, slices.Max(rep.Takeovers).Round(time.Millisecond), ttl)
	return rep, nil
}

// check returns an error if two terms overlapped, a takeover took longer
// than takeoverBound, or the observer missed a leader or went back.
func check(rep report) error {
	var errs []error
	if rep.MostLeaders > 1 {
		errs = append(errs, fmt.Errorf("%d candidates acted as leader at once", rep.MostLeaders))
	}
	terms := slices.SortedFunc(slices.Values(rep.Terms), func(a, b term) int { return a.Start.Compare(b.Start) })
	for i := 1; i < len(terms); i++ {
		prev, t := terms[i-1], terms[i]
		if prev.End.IsZero() || t.Start.Before(prev.End) {
			errs = append(errs, fmt.Errorf("candidate %d became leader while candidate %d still led", t.Candidate, prev.Candidate))
		}
	}
	for _, d := range rep.Takeovers {
		if d > takeoverBound {
			errs = append(errs, fmt.Errorf("a takeover took %v, more than %v", d, takeoverBound))
		}
	}
	for i := 1; i < len(rep.Observed); i++ {
		if rep.Observed[i].FencingToken < rep.Observed[i-1].FencingToken {
			errs = append(errs, fmt.Errorf("the observer went back from %+v to %+v", rep.Observed[i-1], rep.Observed[i]))
		}
	}
	if len(rep.Observed) < len(rep.Terms) {
		errs = append(errs, fmt.Errorf("the observer saw %d leaders of %d terms", len(rep.Observed), len(rep.Terms)))
	}
	if len(rep.Takeovers) != crashes {
		errs = append(errs, fmt.Errorf("%d takeovers, want %d", len(rep.Takeovers), crashes))
	}
	return errors.Join(errs...)
}

// describe says who leads, as the observer prints it.
func describe(l mutex.Leader) string {
	if l == (mutex.Leader{}) {
		return "nobody leads"
	}
	return fmt.Sprintf("%s leads (fencing token %d)", l.Value, l.FencingToken)
}
