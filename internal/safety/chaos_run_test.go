package safety_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestChaosGoroutines runs the chaos suite with clients as goroutines of this
// process, each with its own node set and go-redis clients.
func TestChaosGoroutines(t *testing.T) {
	const clients = 6
	seed := chaosSeed(t)
	duration := chaosDuration(t, 30*time.Second)
	c := startCluster(t, 3, 2, clients)
	baseline := goleak.IgnoreCurrent()

	var o oracle
	var total clientStats
	var counts faultCounts
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()
	var sets []*redlock.Redlock
	var closers []func()
	for i := range clients {
		rs, closeClients, err := newClientSet(c.mesh.Addrs(i), i%2 == 1)
		require.NoError(t, err)
		sets, closers = append(sets, rs), append(closers, closeClients)
	}
	wg := runClients(ctx, "g", seed, sets, []pace{shortPace}, &o, &total)
	newScheduler(t, c, clients, seed, &counts).run(ctx)
	wg.Wait()
	for _, closeClients := range closers {
		closeClients()
	}
	leakedGoroutines := countLeaks(t, baseline)
	finish(t, "goroutines", seed, clients, c.servers, &o, &total, &counts, leakedGoroutines)
}

// runClients runs runCallers on each set (named prefix and its index, its
// randomness drawn from seed and its index, its pace paces[index %
// len(paces)]) until ctx ends, recording into o and adding its counts to
// total once done.
func runClients(ctx context.Context, prefix string, seed uint64, sets []*redlock.Redlock, paces []pace, o *oracle, total *clientStats) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, rs := range sets {
		wg.Go(func() {
			var stats clientStats
			runCallers(ctx, prefix+strconv.Itoa(i), rs, seed, uint64(i), paces[i%len(paces)], o, &stats)
			stats.addTo(total)
		})
	}
	return &wg
}

// callersPerSet is how many client loops share each node set: one takes
// every primitive, the others only the Mutex on chaosHot, so that they pass
// it to each other within the process.
const callersPerSet = 3

// runCallers runs callersPerSet client loops on rs (named id and their
// number, randomness from seed and stream), and returns once all are done.
func runCallers(ctx context.Context, id string, rs *redlock.Redlock, seed, stream uint64, work pace, o *oracle, stats *clientStats) {
	var wg sync.WaitGroup
	for j := range uint64(callersPerSet) {
		hot := ""
		if j > 0 {
			hot = chaosHot
		}
		wg.Go(func() {
			runClient(ctx, id+"."+strconv.FormatUint(j, 10), rs, rand.New(rand.NewPCG(seed, stream+j<<32)), hot, work, o, stats)
		})
	}
	wg.Wait()
}

// TestChaosProcesses runs the chaos suite with clients in separate OS
// processes: this test binary re-executed, each child running TestChaosChild
// against its own proxies. The children record their critical sections on
// CLOCK_MONOTONIC, which all processes on the machine share, so the records
// merge into one timeline.
func TestChaosProcesses(t *testing.T) {
	const clients = 3
	seed := chaosSeed(t)
	duration := chaosDuration(t, 20*time.Second)
	c := startCluster(t, 3, 2, clients)
	dir := t.TempDir()

	var counts faultCounts
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()
	children := make([]*exec.Cmd, clients)
	for i := range clients {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChaosChild$", "-test.count=1", "-test.timeout=10m", "-test.v")
		cmd.Env = append(os.Environ(),
			"QUORUMLOCK_CHAOS_CHILD="+strconv.Itoa(i),
			"QUORUMLOCK_CHAOS_CHILD_ADDRS="+strings.Join(c.mesh.Addrs(i), ","),
			"QUORUMLOCK_CHAOS_CHILD_SEED="+strconv.FormatUint(seed, 10),
			"QUORUMLOCK_CHAOS_CHILD_DURATION="+duration.String(),
			"QUORUMLOCK_CHAOS_CHILD_OUT="+filepath.Join(dir, fmt.Sprintf("child%d.jsonl", i)),
		)
		out, err := os.Create(filepath.Join(dir, fmt.Sprintf("child%d.log", i)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = out.Close() })
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		children[i] = cmd
	}
	newScheduler(t, c, clients, seed, &counts).run(ctx)

	var o oracle
	var total clientStats
	leakedGoroutines := 0
	for i, cmd := range children {
		err := cmd.Wait()
		log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("child%d.log", i)))
		require.NoError(t, err, "child %d failed:\n%s", i, log)
		res := readChild(t, filepath.Join(dir, fmt.Sprintf("child%d.jsonl", i)))
		o.add(res.Sections)
		total.acquired.Add(res.Acquired)
		total.held.Add(res.Held)
		total.unavailable.Add(res.Unavailable)
		total.extended.Add(res.Extended)
		total.extendLost.Add(res.ExtendLost)
		total.unlockNotHeld.Add(res.UnlockNotHeld)
		total.unlockErr.Add(res.UnlockErr)
		total.replayed.Add(res.Replayed)
		total.observed.Add(res.Observed)
		total.observedBack.Add(res.ObservedBack)
		total.passes.Add(res.Passes)
		for k, n := range res.ByKind {
			total.byKind[k].Add(n)
		}
		leakedGoroutines += res.LeakedGoroutines
		if res.LeakedGoroutines > 0 {
			t.Logf("child %d left goroutines behind:\n%s", i, log)
		}
	}
	finish(t, "processes", seed, clients, c.servers, &o, &total, &counts, leakedGoroutines)
}

// childResult is what a child process reports back. ByKind counts its
// acquisitions by kind, in the order of kinds.
type childResult struct {
	Sections                                                                    []section
	Acquired, Held, Unavailable, Extended, ExtendLost, UnlockNotHeld, UnlockErr int64
	Replayed, Observed, ObservedBack, Passes                                    int64
	ByKind                                                                      []int64
	LeakedGoroutines                                                            int
}

// TestChaosChild is the client loop of one child process of
// TestChaosProcesses; run directly, it does nothing.
func TestChaosChild(t *testing.T) {
	id := os.Getenv("QUORUMLOCK_CHAOS_CHILD")
	if id == "" {
		t.Skip("runs only as a child process of TestChaosProcesses")
	}
	seed, err := strconv.ParseUint(os.Getenv("QUORUMLOCK_CHAOS_CHILD_SEED"), 10, 64)
	require.NoError(t, err)
	duration, err := time.ParseDuration(os.Getenv("QUORUMLOCK_CHAOS_CHILD_DURATION"))
	require.NoError(t, err)
	n, err := strconv.Atoi(id)
	require.NoError(t, err)
	baseline := goleak.IgnoreCurrent()

	rs, closeClients, err := newClientSet(strings.Split(os.Getenv("QUORUMLOCK_CHAOS_CHILD_ADDRS"), ","), n%2 == 1)
	require.NoError(t, err)
	var o oracle
	var stats clientStats
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()
	runCallers(ctx, "p"+id, rs, seed, 1000+uint64(n), shortPace, &o, &stats)
	closeClients()

	res := childResult{
		Sections: o.sections, Acquired: stats.acquired.Load(), Held: stats.held.Load(),
		Unavailable: stats.unavailable.Load(), Extended: stats.extended.Load(),
		ExtendLost: stats.extendLost.Load(), UnlockNotHeld: stats.unlockNotHeld.Load(), UnlockErr: stats.unlockErr.Load(),
		Replayed:         stats.replayed.Load(),
		Observed:         stats.observed.Load(),
		ObservedBack:     stats.observedBack.Load(),
		Passes:           stats.passes.Load(),
		ByKind:           stats.kindCounts(),
		LeakedGoroutines: countLeaks(t, baseline),
	}
	f, err := os.Create(os.Getenv("QUORUMLOCK_CHAOS_CHILD_OUT"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, json.NewEncoder(f).Encode(res))
}

func readChild(t *testing.T, path string) childResult {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var res childResult
	require.NoError(t, json.NewDecoder(bufio.NewReader(f)).Decode(&res))
	return res
}

// countLeaks returns how many goroutines started after baseline are still
// running 3 seconds after the clients were closed, leaving out those of the
// test harness itself (proxies restarted by the schedule, the watchers of
// restarted redis-server processes). The grace period covers goroutines that
// are ending: go-redis's background redial, for one, notices a closed pool
// only after its 1s pause.
func countLeaks(t testing.TB, baseline goleak.Option) int {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		var leaked []string
		if err := goleak.Find(baseline); err != nil {
			for _, g := range strings.Split(err.Error(), "[Goroutine ")[1:] {
				if !strings.Contains(g, "toxiproxy") && !strings.Contains(g, "internal/redistest.") && !strings.Contains(g, "internal/netfault.") {
					leaked = append(leaked, g)
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			for _, g := range leaked {
				t.Log("leaked goroutine:", g)
			}
			return len(leaked)
		}
	}
}

// finish heals the cluster, waits for every lock key to be gone (each must
// carry a TTL, so at most the largest TTL), checks the oracle (a name held
// beside a holder it may not share with, a completed idempotency key run
// again, fencing tokens that fail to increase, a holder's write refused by
// the fenced resource within its validity), and reports.
func finish(t *testing.T, kind string, seed uint64, clients int, servers []*redistest.Server, o *oracle, total *clientStats, counts *faultCounts, leakedGoroutines int) {
	t.Helper()
	for _, s := range servers {
		if !s.Running() {
			s.RestartEmpty()
		}
	}
	leakedKeys := leftoverKeys(t, servers)
	violations, fencingViolations := append(o.violations(), o.onceViolations(onceRetention)...), o.fencingViolations()
	staleWrites := o.staleWrites()
	line := summary(kind, seed, clients, total, counts, verdict{
		violations: len(violations), fencingViolations: len(fencingViolations), staleWrites: len(staleWrites), leakedKeys: leakedKeys, leakedGoroutines: leakedGoroutines,
		permitsAtOnce: o.mostAtOnce(kindPermit), readersAtOnce: o.mostAtOnce(kindRead)})
	report(t, line)
	for _, v := range violations {
		t.Error("a name held beside a holder it may not share with, or a completed key run again:", v)
	}
	for _, v := range fencingViolations {
		t.Error("fencing token did not increase:", v)
	}
	for _, v := range staleWrites {
		t.Error("the fenced resource refused a holder inside its validity:", v)
	}
	assert.Empty(t, violations, "replay with QUORUMLOCK_CHAOS_SEED=%d", seed)
	assert.Empty(t, fencingViolations, "replay with QUORUMLOCK_CHAOS_SEED=%d", seed)
	assert.Empty(t, staleWrites, "replay with QUORUMLOCK_CHAOS_SEED=%d", seed)
	assert.Zero(t, leakedKeys, "lock keys left after every TTL passed")
	assert.Zero(t, leakedGoroutines, "goroutines left behind")
	assert.Zero(t, total.observedBack.Load(), "an observer was delivered a leader older than one before")
	assert.Positive(t, total.observed.Load(), "no observer saw a leader")
	for i, n := range total.kindCounts() {
		assert.Positive(t, n, "no %s was ever obtained: the run proves nothing about it", kinds[i])
	}
	assert.Positive(t, counts.total(), "no fault was injected")
	if n := o.overran(); n > 0 {
		t.Logf("%d critical sections ran past their validity (CPU starvation); only their valid part was checked", n)
	}
}

// leftoverKeys waits until no lock key of any primitive remains on any node
// and returns how many remain after the largest TTL (plus a margin). Every
// key but the set's node markers and fencing counters counts, except what the
// library keeps beside a lock key (its waiters' queue and their expiries,
// its release tombstones: bookkeeping that expires on its own); each of
// those must carry a TTL, and a key without one counts at once: it would
// never go away.
func leftoverKeys(t *testing.T, servers []*redistest.Server) int {
	t.Helper()
	deadline := time.Now().Add(maxChaosTTL + time.Second)
	for {
		var left []string
		for _, s := range servers {
			keys, _ := s.Do(t, "KEYS", "*").([]any)
			for _, k := range keys {
				key, _ := k.(string)
				if strings.HasPrefix(key, "quorumlock:node") || strings.HasPrefix(key, "quorumlock:fence") { // on a Cluster, one per slot
					continue
				}
				switch pttl, _ := s.Do(t, "PTTL", key).(int64); {
				case pttl == -1:
					t.Errorf("%s on %s has no TTL", key, s.Addr())
					return 1
				case pttl >= 0 && !bookkeeping(key):
					left = append(left, key+" on "+s.Addr())
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			for _, k := range left {
				t.Log("left behind:", k)
			}
			return len(left)
		}
		time.Sleep(50 * time.Millisecond) // keys expire on the servers' own clock; there is no event to wait on
	}
}

// bookkeeping reports whether key is one the library keeps beside a lock
// key: its waiters' queue ("<key>:quorumlock:q"), their expiries ("...:qx")
// or its release tombstones ("...:rel").
func bookkeeping(key string) bool {
	for _, what := range []string{"q", "qx", "rel"} {
		if strings.HasSuffix(key, ":quorumlock:"+what) {
			return true
		}
	}
	return false
}
