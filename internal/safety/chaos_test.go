package safety_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// The chaos suite: independent clients take a few shared names over and over
// (Mutexes, multi-name locks on two of those names, permits of a semaphore,
// read and write locks of a read-write lock) while a seeded random schedule
// of faults runs against the nodes and the network, and an oracle checks
// that no name was ever held, within the holders' validity, in a way it may
// not be shared (two owners of a Mutex's or a multi-name lock's name, a
// writer beside anyone, more permits than the semaphore's limit), that
// each holder of a Mutex's or multi-name lock's name got a larger fencing
// token than the holders before it, and that a fenced resource never
// refused the write of a holder inside its validity (staleWrites).
//
// Environment:
//
//	QUORUMLOCK_CHAOS_DURATION  how long each chaos test runs (default 30s with goroutine
//	                           clients, 20s with process clients, 20s on Clusters; e.g. 10m)
//	QUORUMLOCK_CHAOS_SEED      replay a run by its seed (printed in the summary)
//	QUORUMLOCK_CHAOS_CLUSTERS  1 to make TestChaosClusters a 2-minute soak
//	QUORUMLOCK_CHAOS_SUMMARY   file the summary lines are appended to
//	                           (default $TMPDIR/quorumlock-chaos-summary.log)

// chaosNames are the lock names every client contends for.
// They share a hash tag, so that a multi-name lock over two of them is
// possible on Cluster nodes (TestChaosClusters).
var chaosNames = []string{"{chaos}:a", "{chaos}:b", "{chaos}:c"}

// chaosHot is the name the callers that pass a Mutex among themselves take
// (runCallers), apart from chaosNames so that the other locks are not
// starved of them.
const chaosHot = "{chaos}:hot"

// chaosTTLs are the TTLs clients pick from; the largest bounds how long a
// killed node without persistence stays down before restarting empty.
var chaosTTLs = []time.Duration{300 * time.Millisecond, time.Second, 2 * time.Second}

const maxChaosTTL = 2 * time.Second

func chaosDuration(t testing.TB, fallback time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv("QUORUMLOCK_CHAOS_DURATION")
	if v == "" {
		return fallback
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("QUORUMLOCK_CHAOS_DURATION=%q: want a positive duration like 10m", v)
	}
	return d
}

func chaosSeed(t testing.TB) uint64 {
	t.Helper()
	v := os.Getenv("QUORUMLOCK_CHAOS_SEED")
	if v == "" {
		return rand.Uint64()
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("QUORUMLOCK_CHAOS_SEED=%q: %v", v, err)
	}
	return seed
}

// clientStats counts what one client did. Its acquisitions are also
// counted by kind, in the order of kinds.
type clientStats struct {
	acquired, held, unavailable, alreadyHeld, otherLockErr atomic.Int64
	extended, extendLost, extendErr                        atomic.Int64
	unlocked, unlockNotHeld, unlockErr                     atomic.Int64
	replayed                                               atomic.Int64 // idempotency: calls answered from a record
	observed, observedBack                                 atomic.Int64 // Election.Observe: leaders delivered, and delivered older than one before
	passes                                                 atomic.Int64 // Mutex acquisitions passed within the process
	byKind                                                 [7]atomic.Int64
}

// count counts an acquisition of kind.
func (s *clientStats) count(kind string) { s.byKind[slices.Index(kinds, kind)].Add(1) }

// kindCounts returns the acquisitions by kind, in the order of kinds.
func (s *clientStats) kindCounts() []int64 {
	counts := make([]int64, len(kinds))
	for i := range counts {
		counts[i] = s.byKind[i].Load()
	}
	return counts
}

func (s *clientStats) addTo(total *clientStats) {
	for i := range kinds {
		total.byKind[i].Add(s.byKind[i].Load())
	}
	for _, p := range [][2]*atomic.Int64{
		{&s.acquired, &total.acquired}, {&s.held, &total.held}, {&s.unavailable, &total.unavailable},
		{&s.alreadyHeld, &total.alreadyHeld}, {&s.otherLockErr, &total.otherLockErr}, {&s.extended, &total.extended}, {&s.extendLost, &total.extendLost},
		{&s.extendErr, &total.extendErr}, {&s.unlocked, &total.unlocked}, {&s.unlockNotHeld, &total.unlockNotHeld},
		{&s.unlockErr, &total.unlockErr}, {&s.replayed, &total.replayed}, {&s.observed, &total.observed}, {&s.observedBack, &total.observedBack}, {&s.passes, &total.passes},
	} {
		p[1].Add(p[0].Load())
	}
}

// newClientSet builds one client's own node set: its own go-redis clients to
// the given addresses (through its own proxies), as a separate service would
// have. Even clients keep go-redis defaults; odd ones fail fast on dial and
// never retry, so both configurations run under faults. The returned func
// closes the set, then its clients, as a service shuts down.
func newClientSet(addrs []string, fastFail bool) (*redlock.Redlock, func(), error) {
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		o := &redis.Options{Addr: a}
		if fastFail {
			o.MaxRetries, o.DialerRetries = -1, 1
		}
		clients[i] = redis.NewClient(o)
	}
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	rs, err := redlock.New(clients)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return rs, func() { _ = rs.Close(); closeAll() }, nil
}

// verdict is what a chaos run found once it was over.
type verdict struct {
	violations, fencingViolations, staleWrites, leakedKeys, leakedGoroutines int
	// The most permits of the semaphore and read locks held at once: how
	// much sharing the oracle saw (1 would mean the run never tried it).
	permitsAtOnce, readersAtOnce int
}

// summary is the line a chaos run prints.
func summary(kind string, seed uint64, clients int, total *clientStats, f *faultCounts, v verdict) string {
	byKind := total.kindCounts()
	return fmt.Sprintf("chaos: kind=%s seed=%d clients=%d acquisitions=%d (mutex=%d, multi=%d, permit=%d, read=%d, write=%d, leader=%d) passes=%d once_runs=%d once_replayed=%d observed_leaders=%d observed_back=%d faults=%d "+
		"(kill=%d, pause=%d, partition=%d, latency=%d, blackhole=%d, reset=%d, restart=%d, slot_move=%d, failover=%d) "+
		"refused_held=%d refused_unavailable=%d extends=%d extends_lost=%d unlock_not_held=%d unlock_failed=%d "+
		"permits_at_once=%d readers_at_once=%d violations=%d fencing_violations=%d stale_writes=%d leaked_keys=%d leaked_goroutines=%d",
		kind, seed, clients, total.acquired.Load(), byKind[0], byKind[1], byKind[2], byKind[3], byKind[4], byKind[6], total.passes.Load(), byKind[5], total.replayed.Load(), total.observed.Load(), total.observedBack.Load(), f.total(),
		f.kill.Load(), f.pause.Load(), f.partition.Load(), f.latency.Load(), f.blackhole.Load(), f.reset.Load(), f.restart.Load(), f.move.Load(), f.failover.Load(),
		total.held.Load(), total.unavailable.Load(), total.extended.Load(), total.extendLost.Load(), total.unlockNotHeld.Load(), total.unlockErr.Load(),
		v.permitsAtOnce, v.readersAtOnce, v.violations, v.fencingViolations, v.staleWrites, v.leakedKeys, v.leakedGoroutines)
}

var summaryMu sync.Mutex

// report logs the summary line and appends it to the summary file, so that it
// can be shown even when `go test` hides the output of passing tests.
func report(t testing.TB, line string) {
	t.Helper()
	t.Log(line)
	path := os.Getenv("QUORUMLOCK_CHAOS_SUMMARY")
	if path == "" {
		path = os.TempDir() + "/quorumlock-chaos-summary.log"
	}
	summaryMu.Lock()
	defer summaryMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("cannot append the summary to %s: %v", path, err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
}
