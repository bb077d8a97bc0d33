// Command bench compares quorumlock with redsync, side by side, in one run.
//
//	cd internal/bench && go run .
//
// It starts five redis-server processes of its own on free ports of
// 127.0.0.1 (and kills them, by their pids, when it ends, also on an error or
// Ctrl-C), puts an in-process toxiproxy proxy in front of one of them for the
// slow-node scenario, and measures four lock implementations, each with its
// own go-redis clients: quorumlock and redsync v4 with default options,
// redsync with WithFailFast(true), and the raw floor, the least a quorum lock
// can do on go-redis (see libs.go). The libraries take turns within every
// scenario, forward then backward, so that machine drift favours none.
//
// Scenarios: (1) uncontended lock+unlock latency, on one lock object and
// on a new one per call; (2) lock latency with one
// node's replies delayed by 50ms; (3) 16 workers contending for one name:
// hand-offs per second, idle gap, wait, fairness, failures, overlaps; (4) 64
// goroutines on distinct names: operations per second; (5) allocations per
// lock+unlock, with testing.Benchmark (also `go test -bench . -benchmem`);
// then, for quorumlock alone, (6) to (9) contenders in separate processes,
// independent waiters, bursts and leases, (10) each primitive's uncontended
// acquire+release next to the Mutex, (11) a semaphore contended by workers
// in separate processes.
//
// It prints one line per scenario and library as results come in, checks
// the project's targets (PASS/FAIL), and rewrites the results part of
// docs/benchmarks.md (between its markers) and docs/benchmarks.png. With the
// default flags a run takes about two minutes on two cores.
//
// This is its own Go module, so that the library's go.mod never depends on
// redsync, toxiproxy or gonum/plot.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// nodes is the size of the node set of every scenario.
const nodes = 5

func main() {
	if len(os.Args) > 1 && os.Args[1] == contenderCmd {
		if err := contenderMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench contender:", err)
			os.Exit(1)
		}
		return
	}
	s := defaultSettings()
	var bin string
	flag.StringVar(&bin, "redis-server", "", "the redis-server binary to start (default: redis-server on PATH, else /usr/bin/redis-server)")
	flag.IntVar(&s.iterations, "iterations", s.iterations, "scenario 1: lock+unlock per library")
	flag.IntVar(&s.slowIterations, "slow-iterations", s.slowIterations, "scenario 2: locks per library with one node slowed")
	flag.DurationVar(&s.contendedFor, "contended", s.contendedFor, "scenario 3: length of each contended run of each library (there are -rounds of them)")
	flag.DurationVar(&s.distinctFor, "distinct", s.distinctFor, "scenario 4: time per library on distinct names, in turns of at most 500ms")
	flag.IntVar(&s.rounds, "rounds", s.rounds, "scenarios 3 and 5: turns of each library (forward, then backward, ...)")
	flag.Var(&s.run, "scenarios", "scenarios to run, as 1-5,8 (docs and chart are rewritten only when all of 1 to 12 run)")
	procs := intList(s.procCounts)
	flag.Var(&procs, "procs", "scenario 6: numbers of contender processes, each dividing the 16 workers")
	flag.DurationVar(&s.procsFor, "procs-for", s.procsFor, "scenario 6: length of the run of each library at each number of processes")
	flag.IntVar(&s.waiters, "waiters", s.waiters, "scenario 7: independent instances, one waiter each")
	flag.DurationVar(&s.waitersTimeout, "waiters-timeout", s.waitersTimeout, "scenario 7: ctx of each waiter's Lock")
	flag.IntVar(&s.burstCalls, "burst-calls", s.burstCalls, "scenario 8: TryLock calls per burst")
	leaseNs := intList{1000, 10000}
	leaseTTLs := durationList{2 * time.Second, 8 * time.Second}
	flag.Var(&leaseNs, "leases", "scenario 9: numbers of leases")
	flag.Var(&leaseTTLs, "lease-ttls", "scenario 9: TTLs of the leases")
	flag.DurationVar(&s.leaseHold, "lease-hold", s.leaseHold, "scenario 9: how long the leases are held")
	flag.IntVar(&s.primitiveIterations, "primitive-iterations", s.primitiveIterations, "scenario 10: acquire+release per primitive")
	flag.DurationVar(&s.semaphoreFor, "semaphore-for", s.semaphoreFor, "scenario 11: length of the contended semaphore's run")
	flag.IntVar(&s.firstLocks, "first-locks", s.firstLocks, "scenario 12: first locks of a new instance per library")
	doc := flag.String("doc", filepath.Join("..", "..", "docs", "benchmarks.md"), `Markdown file whose results markers are rewritten ("" to skip)`)
	chart := flag.String("chart", filepath.Join("..", "..", "docs", "benchmarks.png"), `PNG chart to write ("" to skip)`)
	flag.Parse()
	s.procCounts = procs
	s.leases = makeLeases(leaseNs, leaseTTLs)

	err := s.check()
	if err == nil && bin == "" {
		bin, err = findRedisServer()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, os.Stdout, bin, s, *doc, *chart)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run starts the nodes and the slow proxy, runs the five scenarios, prints
// their lines and the targets, and writes the report. Whatever happens, it
// closes the clients, stops the proxy and kills the servers it started
// before it returns. ctx (Ctrl-C) aborts the run.
func run(ctx context.Context, out io.Writer, bin string, s settings, doc, chart string) (err error) {
	version, err := serverVersion(ctx, bin)
	if err != nil {
		return err
	}
	srv, err := startServers(ctx, bin, nodes)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.Stop()) }()
	slow, err := startSlowNode(srv.Addrs()[0], s.slowDelay)
	if err != nil {
		return err
	}
	defer slow.Close() // after the clients, deferred below, are closed
	libs, err := newLibraries(srv.Addrs(), slow.Addr())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeLibraries(libs)) }()

	r := &report{Machine: describeMachine(ctx, version), Settings: s}
	for _, l := range libs {
		r.Names = append(r.Names, l.name)
	}
	fmt.Fprintf(out, "machine:   %s; load average %s\nlibraries: quorumlock %s, redsync %s, go-redis %s\nnodes:     %v (slow proxy for node 0: %s)\n\n",
		r.Machine, r.Machine.Load, r.Machine.Library, r.Machine.Redsync, r.Machine.GoRedis, srv.Addrs(), slow.Addr())

	started := time.Now()
	if err := runClassic(ctx, out, libs, s, r); err != nil {
		return err
	}
	if err := runLoad(ctx, out, srv.Addrs(), s, r); err != nil {
		return err
	}
	if err := runPrimitives(ctx, out, srv.Addrs(), s, r); err != nil {
		return err
	}
	r.Took = time.Since(started)

	checks := r.checks()
	fmt.Fprintf(out, "\ntargets (quorumlock), after %v:\n", r.Took.Round(time.Second))
	for _, c := range checks {
		fmt.Fprintf(out, "  %-4s %-6s %s: %s\n", passFail(c.Pass), c.ID, c.Target, c.Measured)
	}
	if s.run != allScenarios {
		fmt.Fprintf(out, "scenarios %s only: docs/benchmarks.md and the chart left as they are\n", s.run)
		return nil
	}
	return writeReport(out, r, checks, doc, chart)
}

// runClassic runs those of scenarios 1 to 5 that s chooses, in order,
// printing their lines.
func runClassic(ctx context.Context, out io.Writer, libs []*library, s settings, r *report) (err error) {
	if s.run.has(1) {
		if r.Uncontended, err = uncontended(ctx, libs, s); err != nil {
			return fmt.Errorf("uncontended: %w", err)
		}
		printLatency(out, "uncontended", "lock+unlock", r.Names, r.Uncontended)
		if r.UncontendedNew, err = uncontendedNew(ctx, libs, s); err != nil {
			return fmt.Errorf("uncontended, new lock per call: %w", err)
		}
		printLatency(out, "uncontended", "new+lock+unlock", r.Names, r.UncontendedNew)
	}
	if s.run.has(2) {
		if r.Slowed, err = slowNodeLock(ctx, libs, s); err != nil {
			return fmt.Errorf("slow node: %w", err)
		}
		printLatency(out, "slow-node", "lock", r.Names, r.Slowed)
	}
	if s.run.has(3) {
		if r.Contended, err = contended(ctx, libs, s); err != nil {
			return fmt.Errorf("contended: %w", err)
		}
		printContended(out, r.Contended)
	}
	if s.run.has(4) {
		if r.Distinct, err = distinct(ctx, libs, s); err != nil {
			return fmt.Errorf("distinct names: %w", err)
		}
		printDistinct(out, r.Names, r.Distinct)
	}
	if s.run.has(5) {
		if r.Allocs, err = allocations(ctx, out, libs, s); err != nil {
			return fmt.Errorf("allocations: %w", err)
		}
		printAllocs(out, r.Names, r.Allocs)
	}
	return nil
}

// runLoad runs those of scenarios 6 to 9 that s chooses, in order, printing
// their lines. Each library instance they use has clients of its own.
func runLoad(ctx context.Context, out io.Writer, addrs []string, s settings, r *report) (err error) {
	if s.run.has(6) {
		if r.Procs, err = procsScenario(ctx, out, addrs, s); err != nil {
			return fmt.Errorf("processes: %w", err)
		}
	}
	if s.run.has(7) {
		if r.Waiters, err = waitersScenario(ctx, out, addrs, s); err != nil {
			return fmt.Errorf("independent waiters: %w", err)
		}
	}
	if s.run.has(8) {
		if r.Bursts, err = burstScenario(ctx, out, addrs, s); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
	}
	if s.run.has(9) {
		if r.Leases, err = leasesScenario(ctx, out, addrs, s); err != nil {
			return fmt.Errorf("leases: %w", err)
		}
		if r.RenewFloor, err = extendFloor(ctx, addrs, 10000, s.floorFor); err != nil {
			return fmt.Errorf("renewal floor: %w", err)
		}
		fmt.Fprintf(out, "%-12s %-20s %s pipelined renewal scripts over the 5 nodes\n", "leases", "raw node floor", formatRate(r.RenewFloor))
	}
	return nil
}

// writeReport draws the chart and rewrites the document, each unless its
// path is empty.
func writeReport(out io.Writer, r *report, checks []check, doc, chart string) error {
	chartRef := ""
	if chart != "" {
		if err := drawChart(chart, r); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", chart)
		if doc != "" {
			if rel, err := filepath.Rel(filepath.Dir(doc), chart); err == nil {
				chartRef = filepath.ToSlash(rel)
			}
		}
	}
	if doc != "" {
		if err := writeDoc(doc, r.markdown(chartRef, checks)); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		fmt.Fprintf(out, "wrote %s\n", doc)
	}
	return nil
}
