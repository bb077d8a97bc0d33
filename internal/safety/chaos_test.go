package safety_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The chaos suite: independent clients take a few shared names over and over
// while a seeded random schedule of faults runs against the nodes and the
// network, and an oracle checks that no two clients were ever inside the same
// name's critical section within their validity, and that each holder of a
// name got a larger fencing token than the holders before it.
//
// Environment:
//
//	QUORUMLOCK_CHAOS_DURATION  how long each chaos test runs (default 20s; e.g. 10m)
//	QUORUMLOCK_CHAOS_SEED      replay a run by its seed (printed in the summary)
//	QUORUMLOCK_CHAOS_SUMMARY   file the summary lines are appended to
//	                           (default $TMPDIR/quorumlock-chaos-summary.log)

// chaosNames are the lock names every client contends for.
var chaosNames = []string{"chaos:a", "chaos:b", "chaos:c"}

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

// clientStats counts what one client did.
type clientStats struct {
	acquired, held, unavailable, alreadyHeld, otherLockErr atomic.Int64
	extended, extendLost, extendErr                        atomic.Int64
	unlocked, unlockNotHeld, unlockErr                     atomic.Int64
}

func (s *clientStats) addTo(total *clientStats) {
	for _, p := range [][2]*atomic.Int64{
		{&s.acquired, &total.acquired}, {&s.held, &total.held}, {&s.unavailable, &total.unavailable},
		{&s.alreadyHeld, &total.alreadyHeld}, {&s.otherLockErr, &total.otherLockErr}, {&s.extended, &total.extended}, {&s.extendLost, &total.extendLost},
		{&s.extendErr, &total.extendErr}, {&s.unlocked, &total.unlocked}, {&s.unlockNotHeld, &total.unlockNotHeld},
		{&s.unlockErr, &total.unlockErr},
	} {
		p[1].Add(p[0].Load())
	}
}

// runClient is one client's loop: until ctx ends, lock a random name, run a
// short critical section (sometimes extending the lock in the middle), record
// it with the acquisition's fencing token, unlock. Every client draws its own
// TTL per Mutex. It returns when ctx is done and its last lock is released.
func runClient(ctx context.Context, id string, rs *redlock.Redlock, rng *rand.Rand, record func(section), stats *clientStats) {
	mutexes := map[string]*mutex.Mutex{}
	for _, name := range chaosNames {
		mutexes[name] = rs.NewMutex(name,
			mutex.WithTTL(chaosTTLs[rng.IntN(len(chaosTTLs))]),
			mutex.WithRetryDelay(time.Millisecond, 32*time.Millisecond),
			mutex.WithFencing())
	}
	for ctx.Err() == nil {
		name := chaosNames[rng.IntN(len(chaosNames))]
		m := mutexes[name]
		lockCtx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
		err := m.LockContext(lockCtx)
		cancel()
		switch {
		case err == nil:
			stats.acquired.Add(1)
		case errors.Is(err, mutex.ErrAlreadyHeld):
			// An earlier Unlock could not reach a majority, so this Mutex
			// still holds its lock: release it before taking it again.
			stats.alreadyHeld.Add(1)
			if m.UnlockContext(context.WithoutCancel(ctx)) != nil {
				sleepCtx(ctx, 10*time.Millisecond) // nodes are down; do not spin
			}
			continue
		case errors.Is(err, mutex.ErrNodesUnavailable):
			stats.unavailable.Add(1)
			continue
		case errors.Is(err, mutex.ErrNotObtained):
			stats.held.Add(1)
			continue
		default:
			stats.otherLockErr.Add(1)
			continue
		}
		fence := m.FencingToken()
		enterWall, enter := time.Now(), monoNow()
		until := enter + m.Until().Sub(enterWall).Nanoseconds()
		work(rng)
		if rng.IntN(4) == 0 { // extend in the middle of the section
			switch err := m.ExtendContext(context.WithoutCancel(ctx)); {
			case err == nil:
				stats.extended.Add(1)
				now, mono := time.Now(), monoNow()
				until = mono + m.Until().Sub(now).Nanoseconds()
				work(rng)
			case errors.Is(err, mutex.ErrNotHeld):
				stats.extendLost.Add(1)
			default:
				stats.extendErr.Add(1)
			}
		}
		record(section{Client: id, Name: name, Enter: enter, Exit: monoNow(), Until: until, Fence: fence})
		switch err := m.UnlockContext(context.WithoutCancel(ctx)); {
		case err == nil:
			stats.unlocked.Add(1)
		case errors.Is(err, mutex.ErrNotHeld):
			stats.unlockNotHeld.Add(1)
		default:
			stats.unlockErr.Add(1)
		}
	}
}

// work is the critical section: up to 3ms, well inside every validity.
func work(rng *rand.Rand) { time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond) }

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

// summary is the line a chaos run prints.
func summary(kind string, seed uint64, clients int, total *clientStats, f *faultCounts, violations, fencingViolations, leakedKeys, leakedGoroutines int) string {
	return fmt.Sprintf("chaos: kind=%s seed=%d clients=%d acquisitions=%d faults=%d "+
		"(kill=%d, pause=%d, partition=%d, latency=%d, blackhole=%d, reset=%d, restart=%d) "+
		"refused_held=%d refused_unavailable=%d extends=%d extends_lost=%d unlock_not_held=%d unlock_failed=%d "+
		"violations=%d fencing_violations=%d leaked_keys=%d leaked_goroutines=%d",
		kind, seed, clients, total.acquired.Load(), f.total(),
		f.kill.Load(), f.pause.Load(), f.partition.Load(), f.latency.Load(), f.blackhole.Load(), f.reset.Load(), f.restart.Load(),
		total.held.Load(), total.unavailable.Load(), total.extended.Load(), total.extendLost.Load(), total.unlockNotHeld.Load(), total.unlockErr.Load(),
		violations, fencingViolations, leakedKeys, leakedGoroutines)
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
