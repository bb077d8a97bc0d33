package safety_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestChaosClusters runs the chaos suite on nodes that are Redis Clusters (3
// Clusters of 3 primaries with a replica each), clients as goroutines, with
// the faults of a Cluster: the slot of a lock name migrated to another shard
// key by key (MIGRATING/IMPORTING, clients get ASK or TRYAGAIN meanwhile), a
// shard primary killed and its replica taking over (the writes it missed are
// lost; the old primary then rejoins, empty, as its replica), and a shard
// primary paused. One fault runs at a time, on one Cluster; every name's
// shard is hit, the shared names' (the Mutexes' and multi-name locks') half
// of the time. The clients' go-redis clients connect to the shards
// directly, so the network faults of the other chaos tests do not apply.
// The sets run with the restart quarantine (the largest TTL), which a
// failover to a replica needs.
//
// Two clients in three hold long critical sections (longPace), and every
// holder of a name alone writes to a fenced resource (see staleWrites), so
// that a second owner let in shows even when it enters one round trip
// after the first: a library that counts ASK/TRYAGAIN/MOVED answers as
// votes fails here within seconds. Every run of the package runs it for 20s (about 25s
// in all, 18 servers on two cores); QUORUMLOCK_CHAOS_CLUSTERS=1 makes it a
// 2-minute soak.
func TestChaosClusters(t *testing.T) {
	const clients = 6
	seed := chaosSeed(t)
	length := 20 * time.Second
	if os.Getenv("QUORUMLOCK_CHAOS_CLUSTERS") == "1" {
		length = 2 * time.Minute
	}
	duration := chaosDuration(t, length)
	start := time.Now()
	clusters := redistest.StartClusters(t, 3, 3, 1)
	t.Logf("3 Clusters of 3 primaries and 3 replicas started in %v", time.Since(start))
	baseline := goleak.IgnoreCurrent()

	var o oracle
	var total clientStats
	var counts faultCounts
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()
	var sets []*redlock.Redlock
	var closers []func()
	for range clients {
		nodes := make([]redis.UniversalClient, len(clusters))
		for n, c := range clusters {
			nodes[n] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(),
				MaxRetries: -1, MaxRedirects: -1, DialerRetries: 1, DialTimeout: time.Second})
		}
		rs, err := redlock.New(nodes, redlock.WithRestartQuarantine(maxChaosTTL))
		require.NoError(t, err)
		sets = append(sets, rs)
		closers = append(closers, func() {
			_ = rs.Close()
			for _, n := range nodes {
				_ = n.Close()
			}
		})
	}
	wg := runClients(ctx, "c", seed, sets, []pace{shortPace, longPace, longPace}, &o, &total)
	newClusterScheduler(t, clusters, seed, &counts).run(ctx)
	wg.Wait()
	for _, closeClients := range closers {
		closeClients()
	}
	leakedGoroutines := countLeaks(t, baseline)
	var primaries []*redistest.Server // replicas answer MOVED for their keys
	for _, c := range clusters {
		primaries = append(primaries, c.Primaries...)
	}
	finish(t, "clusters", seed, clients, primaries, &o, &total, &counts, leakedGoroutines)
	if counts.move.Load() == 0 || counts.failover.Load() == 0 {
		t.Errorf("the schedule moved %d slots and failed over %d primaries: want both", counts.move.Load(), counts.failover.Load())
	}
}

// clusterScheduler injects the faults of TestChaosClusters, one at a time,
// from the test's goroutine (the helpers of redistest fail the test), with
// all randomness from one seeded source.
type clusterScheduler struct {
	t        *testing.T
	clusters []*redistest.Cluster
	rng      *rand.Rand
	counts   *faultCounts
	slots    []int         // the slots of every key the clients lock
	owner    []map[int]int // per Cluster, a slot's shard (its index in Primaries)
}

func newClusterScheduler(t *testing.T, clusters []*redistest.Cluster, seed uint64, counts *faultCounts) *clusterScheduler {
	s := &clusterScheduler{t: t, clusters: clusters, rng: rand.New(rand.NewPCG(seed, seed^0xc105)), counts: counts}
	keys := append([]string{chaosNames[0], chaosSemaphore, chaosRW, chaosElection}, onceKeyNames()...)
	for _, c := range clusters {
		owner := map[int]int{}
		for _, k := range keys {
			owner[keyspace.Slot(k)] = c.Shard(k)
		}
		s.owner = append(s.owner, owner)
	}
	for sl := range s.owner[0] {
		s.slots = append(s.slots, sl)
	}
	slices.Sort(s.slots) // map order is random; the seed must replay
	return s
}

// onceKeyNames returns the idempotency keys the clients use (see runOnce).
func onceKeyNames() []string {
	var keys []string
	for i := range onceKeys {
		keys = append(keys, "chaos:once:"+strconv.Itoa(i))
	}
	return keys
}

// maxClusterFaults bounds the faults of one run (a 2-minute soak injects
// about 500).
const maxClusterFaults = 20_000

// run injects faults, every 20 to 200ms, until ctx ends.
func (s *clusterScheduler) run(ctx context.Context) {
	for range maxClusterFaults {
		if !sleepCtx(ctx, time.Duration(20+s.rng.IntN(180))*time.Millisecond) {
			return
		}
		s.inject(ctx)
	}
}

// inject picks a Cluster and one of the lock names' slots (the shared
// names' half of the time: a second owner shows best there), and moves the
// slot to another shard (4 times in 10), fails its shard's primary over to
// the replica by killing it (3 in 10; not by a manual failover, which the
// Cluster may give up on, e.g. when its election lacks votes), or pauses
// that primary for 50 to 300ms, well inside the Clusters' 1s node
// timeout, so that no failover happens unscheduled.
func (s *clusterScheduler) inject(ctx context.Context) {
	ci := s.rng.IntN(len(s.clusters))
	c, sl := s.clusters[ci], s.slots[s.rng.IntN(len(s.slots))]
	if s.rng.IntN(2) == 0 {
		sl = keyspace.Slot(chaosNames[0])
	}
	shard := s.owner[ci][sl]
	switch k := s.rng.IntN(10); {
	case k < 4:
		to := (shard + 1 + s.rng.IntN(len(c.Primaries)-1)) % len(c.Primaries)
		s.counts.move.Add(1)
		c.MoveSlot(s.t, sl, shard, to, time.Duration(10+s.rng.IntN(90))*time.Millisecond)
		s.owner[ci][sl] = to
	case k < 7:
		if !replicaReady(s.t, c.Replicas[shard][0]) {
			return
		}
		s.counts.failover.Add(1)
		c.Failover(s.t, shard)                                     // kills the primary: what its replica missed is lost
		c.Replicas[shard][len(c.Replicas[shard])-1].RestartEmpty() // rejoins as the new primary's replica
	default:
		p := c.Primaries[shard]
		s.counts.pause.Add(1)
		p.Pause()
		sleepCtx(ctx, time.Duration(50+s.rng.IntN(250))*time.Millisecond)
		p.Resume()
	}
}

// replicaReady reports whether r runs and its replication link is up, so that
// it can take over its primary.
func replicaReady(t *testing.T, r *redistest.Server) bool {
	if !r.Running() {
		return false
	}
	info, _ := r.Do(t, "INFO", "replication").(string)
	return strings.Contains(info, "master_link_status:up")
}
