package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// contenderCmd is the hidden first argument that makes the program a
// contender process of scenario 6 instead of the bench.
const contenderCmd = "contender"

const (
	// readyTimeout bounds the wait for every contender process of a run to
	// report that it is ready (built its clients, dialed every node).
	contenderReadyTimeout = 30 * time.Second

	// contenderGrace is how long after its run should have ended a
	// contender process exits on its own, whatever happens: a parent that
	// hangs cannot leave it behind.
	contenderGrace = 30 * time.Second
)

// procsResult is scenario 6 for one library at one number of processes.
type procsResult struct {
	Procs        int
	Elapsed      time.Duration // from the first process's start to the last one's end
	Acquisitions int
	Failed       int // Lock calls that failed before the run ended
	FirstFailure string
	UnlockFailed int
	Overlaps     int // acquisitions whose interval overlaps an earlier one, across all processes
	MostAtOnce   int // the most critical sections in progress at one time, across all processes
	Wait         percentiles
	Turns        []int // per worker, over all processes
}

// HandoffsPerSec is successful acquisitions per second of wall time.
func (p *procsResult) HandoffsPerSec() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Acquisitions) / p.Elapsed.Seconds()
}

// Fairness returns the turns of the least and of the busiest worker over
// all processes, and their ratio.
func (p *procsResult) Fairness() (least, busiest int, ratio float64) {
	c := contendedResult{Turns: p.Turns}
	return c.Fairness()
}

// contenderReport is what one contender process writes on its stdout, as
// JSON, when its run is over. Times are wall-clock UnixNano: every process
// runs on this machine, so their clocks are one clock.
type contenderReport struct {
	Start, End   int64
	Workers      []contenderWorker
	Failed       int
	FirstFailure string
	UnlockFailed int
}

// contenderWorker is one worker of a contender process: for each turn, when
// Lock returned, when its Unlock was sent (the critical section), and how
// long Lock waited.
type contenderWorker struct {
	Acquired, Released, Wait []int64
}

// procsScenario is scenario 6: for every count P in s.procCounts and every
// library, P contender processes (re-executions of this program) with
// s.workers/P workers each, all on one name, for s.procsFor; libraries in
// turns forward then backward. Results are indexed [library][count].
func procsScenario(ctx context.Context, out io.Writer, addrs []string, s settings) ([][]procsResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	results := make([][]procsResult, numLoadLibs)
	for i := range results {
		results[i] = make([]procsResult, len(s.procCounts))
	}
	for ci, p := range s.procCounts {
		for _, lib := range order(numLoadLibs, ci) {
			name := fmt.Sprintf("bench:procs:%s:p%d", loadNames[lib], p)
			res, err := runContenders(ctx, self, lib, addrs, name, 0, p, s)
			if err != nil {
				return nil, fmt.Errorf("%s, %d processes: %w", loadNames[lib], p, err)
			}
			results[lib][ci] = res
			printProcs(out, loadNames[lib], res)
		}
	}
	return results, nil
}

// runContenders starts p contender processes, waits until each has said it
// is ready, tells them all to go, and gathers their reports. Their workers
// take the Mutex on name, or, when limit > 0, permits of the semaphore
// name of that limit (quorumlock only). The processes
// are this program's own children, killed by their pid if anything fails;
// each also exits when its stdin closes (the parent died) or contenderGrace
// after its run.
func runContenders(ctx context.Context, self string, lib int, addrs []string, name string, limit, p int, s settings) (procsResult, error) {
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Reader
	}
	var children []*child
	defer func() {
		for _, c := range children {
			c.stdin.Close()
			if c.cmd.ProcessState == nil { // not reaped: kill it by its pid
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	}()
	per := s.workers / p
	for range p {
		cmd := exec.CommandContext(ctx, self, contenderCmd,
			"-lib", loadNames[lib], "-addrs", strings.Join(addrs, ","), "-name", name, "-limit", fmt.Sprint(limit),
			"-workers", fmt.Sprint(per), "-for", s.procsFor.String(),
			"-hold", s.hold.String(), "-pause", s.pause.String(), "-lock-timeout", s.lockTimeout.String())
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = sysProcAttr()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return procsResult{}, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return procsResult{}, err
		}
		if err := cmd.Start(); err != nil {
			return procsResult{}, err
		}
		children = append(children, &child{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20)})
	}
	// Every child prints "ready" once its clients answer; then all go.
	ready := make(chan error, len(children))
	for _, c := range children {
		go func() {
			line, err := c.out.ReadString('\n')
			if err == nil && strings.TrimSpace(line) != "ready" {
				err = fmt.Errorf("contender said %q, not ready", line)
			}
			ready <- err
		}()
	}
	timer := time.NewTimer(contenderReadyTimeout)
	defer timer.Stop()
	for range children {
		select {
		case err := <-ready:
			if err != nil {
				return procsResult{}, fmt.Errorf("contender: %w", err)
			}
		case <-timer.C:
			return procsResult{}, errors.New("contenders not ready in time")
		case <-ctx.Done():
			return procsResult{}, ctx.Err()
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return procsResult{}, err
		}
	}
	reports := make([]contenderReport, len(children))
	errs := make([]error, len(children))
	var wg sync.WaitGroup
	for i, c := range children {
		wg.Go(func() {
			errs[i] = json.NewDecoder(c.out).Decode(&reports[i])
			if errs[i] == nil {
				errs[i] = c.cmd.Wait()
			}
		})
	}
	wg.Wait() // bounded: each child exits contenderGrace after its run at the latest
	if err := errors.Join(errs...); err != nil {
		return procsResult{}, err
	}
	return mergeContenders(p, reports), nil
}

// mergeContenders sums the processes' reports into one result, and counts
// overlaps over every critical section of every process.
func mergeContenders(p int, reports []contenderReport) procsResult {
	res := procsResult{Procs: p}
	var start, end int64
	var waits []time.Duration
	var spans [][2]int64
	for i, r := range reports {
		if i == 0 || r.Start < start {
			start = r.Start
		}
		end = max(end, r.End)
		res.Failed += r.Failed
		res.UnlockFailed += r.UnlockFailed
		if res.FirstFailure == "" {
			res.FirstFailure = r.FirstFailure
		}
		for _, w := range r.Workers {
			res.Turns = append(res.Turns, len(w.Acquired))
			res.Acquisitions += len(w.Acquired)
			for t := range w.Acquired {
				waits = append(waits, time.Duration(w.Wait[t]))
				spans = append(spans, [2]int64{w.Acquired[t], w.Released[t]})
			}
		}
	}
	res.Elapsed = time.Duration(end - start)
	res.Wait = summarize(waits)
	res.MostAtOnce = mostAtOnce(spans)
	res.Overlaps = overlaps(spans)
	return res
}

// mostAtOnce returns the most of the [begin, end] spans in progress at one
// time; a span that begins when another ends does not overlap it.
func mostAtOnce(spans [][2]int64) int {
	type event struct {
		at    int64
		delta int
	}
	events := make([]event, 0, 2*len(spans))
	for _, sp := range spans {
		events = append(events, event{sp[0], 1}, event{sp[1], -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := cmpInt64(a.at, b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends before begins at the same instant
	})
	most, now := 0, 0
	for _, e := range events {
		now += e.delta
		most = max(most, now)
	}
	return most
}

// overlaps returns how many of the [begin, end] spans begin before an
// earlier-beginning span has ended. It sorts spans in place.
func overlaps(spans [][2]int64) int {
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmpInt64(a[0], b[0]) })
	n := 0
	var reach int64
	for i, sp := range spans {
		if i > 0 && sp[0] < reach {
			n++
		}
		reach = max(reach, sp[1])
	}
	return n
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// contenderMain is the program run as a contender process (args after
// contenderCmd). It builds its own library on its own clients, prints
// "ready", waits for "go" on stdin, runs its workers for -for, and prints its
// contenderReport as JSON. It exits when stdin closes before the report
// (the parent died), and in any case contenderGrace after its run.
func contenderMain(args []string) error {
	fs := flag.NewFlagSet(contenderCmd, flag.ContinueOnError)
	libName := fs.String("lib", "", "library: quorumlock or redsync")
	addrs := fs.String("addrs", "", "comma-separated node addresses")
	name := fs.String("name", "", "lock name")
	limit := fs.Int("limit", 0, "take permits of a semaphore of this limit instead of a Mutex (quorumlock only)")
	var s settings
	fs.IntVar(&s.workers, "workers", 1, "workers")
	fs.DurationVar(&s.contendedFor, "for", time.Second, "length of the run")
	fs.DurationVar(&s.hold, "hold", time.Millisecond, "time held")
	fs.DurationVar(&s.pause, "pause", time.Millisecond, "pause after Unlock")
	fs.DurationVar(&s.lockTimeout, "lock-timeout", 5*time.Second, "ctx of each Lock")
	if err := fs.Parse(args); err != nil {
		return err
	}
	kind := slices.Index(loadNames[:], *libName)
	if kind < 0 || *addrs == "" || *name == "" || s.workers < 1 || s.contendedFor <= 0 || *limit < 0 || (*limit > 0 && kind != loadQuorumlock) {
		return errors.New("contender: bad arguments")
	}
	// The hard stop: whatever happens, this process ends.
	hard := time.AfterFunc(contenderReadyTimeout+s.contendedFor+contenderGrace, func() { os.Exit(3) })
	defer hard.Stop()

	lib, err := newLoadLib(kind, strings.Split(*addrs, ","))
	if err != nil {
		return err
	}
	defer lib.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := lib.warm(ctx, s.workers); err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("contender: no go from the parent (%q, %v)", line, err)
	}
	go func() { // the parent closing stdin (or dying) ends the run
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	slots := make([]*slot, s.workers)
	mk := func(n string) locker { return lib.newLock(n, 0) }
	if *limit > 0 {
		mk = func(n string) locker { return &permitLock{s: lib.rl.NewSemaphore(n, *limit)} }
	}
	for w := range slots {
		slots[w] = newSlot(mk, *name)
	}
	start := time.Now()
	logs, _, _, err := contendRound(ctx, slots, s)
	if err != nil {
		return err
	}
	rep := contenderReport{Start: start.UnixNano(), End: time.Now().UnixNano()}
	for _, l := range logs {
		var w contenderWorker
		for _, t := range l.turns {
			w.Acquired = append(w.Acquired, t.acquired.UnixNano())
			w.Released = append(w.Released, t.unlocking.UnixNano())
			w.Wait = append(w.Wait, int64(t.wait))
		}
		rep.Workers = append(rep.Workers, w)
		rep.Failed += l.failed.N
		rep.UnlockFailed += l.unlockFailed.N
		if rep.FirstFailure == "" && l.failed.First != nil {
			rep.FirstFailure = l.failed.First.Error()
		}
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}
