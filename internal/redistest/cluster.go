package redistest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/keyspace"
)

const (
	// clusterTimeout bounds how long forming a Cluster, or a failover in it,
	// may take before the test fails.
	clusterTimeout = 15 * time.Second

	// clusterNodeTimeout is the Clusters' cluster-node-timeout in ms: how
	// long a node may not answer before the others mark it failing.
	clusterNodeTimeout = "1000"

	// clusterConfigFile is the Cluster node's own state file, which a
	// restart without data keeps, as a real node's disk does.
	clusterConfigFile = "nodes.conf"
)

// Cluster is one Redis Cluster started by [StartClusters]: its primaries,
// each serving an equal range of the hash slots, and their replicas.
type Cluster struct {
	// Primaries are the servers that served the slots when the Cluster was
	// formed; Primaries[i] served the i-th range.
	Primaries []*Server
	// Replicas[i] lists the replicas of Primaries[i] (empty without any).
	Replicas [][]*Server
	ids      map[*Server]string
}

// StartClusters starts n independent Redis Clusters of primaries primaries
// and replicas replicas per primary each (servers as [Start] runs them, plus
// cluster-enabled yes, a 1s cluster-node-timeout and a bus port of their
// own), and returns once every node of every Cluster reports cluster_state
// ok, every slot is served and every replica's link is up (at most 15s). It
// needs redis-server 7 or later. Cleanup is as for Start.
func StartClusters(t testing.TB, n, primaries, replicas int, opts ...Option) []*Cluster {
	t.Helper()
	if n < 1 || primaries < 1 || replicas < 0 {
		t.Fatalf("redistest: StartClusters(%d, %d, %d): want n and primaries at least 1", n, primaries, replicas)
	}
	bin := Require(t)
	major, err := majorVersion(bin)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if major < 7 {
		t.Fatalf("redistest: StartClusters needs redis-server 7 or later (cluster-port), found %d", major)
	}
	per := primaries * (1 + replicas)
	servers := make([]*Server, n*per)
	for i := range servers {
		servers[i] = newServer(t, bin, newConfig(opts), major)
		servers[i].cfg.cluster = true
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.cleanup()
		}
	})
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.startClustered() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	clusters := make([]*Cluster, n)
	for i := range clusters {
		group := servers[i*per : (i+1)*per]
		// Copies: Failover and Promote reorder them, never servers.
		c := &Cluster{Primaries: slices.Clone(group[:primaries]), Replicas: make([][]*Server, primaries), ids: map[*Server]string{}}
		for p := range primaries {
			c.Replicas[p] = slices.Clone(group[primaries+p*replicas : primaries+(p+1)*replicas])
		}
		clusters[i] = c
		wg.Go(func() { errs[i] = c.form() })
	}
	wg.Wait()
	if err := errors.Join(errs[:n]...); err != nil {
		t.Fatalf("redistest: forming Clusters: %v", err)
	}
	return clusters
}

// startClustered starts the server on fresh ports (a client port and a bus
// port), again on new ones if either is taken.
func (s *Server) startClustered() error {
	var err error
	for range startAttempts {
		var ports []int
		if ports, err = freePorts(2); err != nil {
			return fmt.Errorf("picking free ports: %w", err)
		}
		s.cfg.busPort = ports[1]
		if err = s.start(ports[0]); err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
	}
	return err
}

// Servers returns the Cluster's primaries, then their replicas.
func (c *Cluster) Servers() []*Server {
	all := append([]*Server(nil), c.Primaries...)
	for _, rs := range c.Replicas {
		all = append(all, rs...)
	}
	return all
}

// Addrs returns the addresses of the Cluster's primaries, the seeds a
// ClusterClient is given.
func (c *Cluster) Addrs() []string { return Addrs(c.Primaries) }

// Client returns a new ClusterClient over the Cluster, seeded with the
// primaries (and authenticating as [Server.Client] does), with go-redis's
// defaults unless opts change them. It is closed at t's cleanup.
func (c *Cluster) Client(t testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	o := &redis.ClusterOptions{Addrs: c.Addrs(), Password: c.Primaries[0].cfg.Password}
	for _, opt := range opts {
		opt(o)
	}
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() {
		if err := cc.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			t.Errorf("redistest: closing Cluster client of %v: %v", o.Addrs, err)
		}
	})
	return cc
}

// ClusterClients returns one [Cluster.Client] with opts per Cluster, in
// order, as the interface the lock library takes.
func ClusterClients(t testing.TB, clusters []*Cluster, opts ...func(*redis.ClusterOptions)) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(clusters))
	for i, c := range clusters {
		clients[i] = c.Client(t, opts...)
	}
	return clients
}

// Shard returns the index in Primaries of the primary that served key's
// slot when the Cluster was formed.
func (c *Cluster) Shard(key string) int {
	return keyspace.Slot(key) * len(c.Primaries) / keyspace.Slots
}

// Failover kills Primaries[i] and promotes its first replica with CLUSTER
// FAILOVER TAKEOVER, blocking until every live node agrees that the replica
// serves the slots (at most 15s). The replica then becomes Primaries[i].
func (c *Cluster) Failover(t testing.TB, i int) {
	t.Helper()
	if len(c.Replicas[i]) == 0 {
		t.Fatalf("redistest: Failover: primary %d has no replica", i)
	}
	old, next := c.Primaries[i], c.Replicas[i][0]
	old.Kill()
	if err := call(next, "CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		t.Fatalf("redistest: Failover: %v", err)
	}
	c.Primaries[i], c.Replicas[i] = next, append(c.Replicas[i][1:], old)
	err := c.await(func(s *Server) error {
		if !s.Running() {
			return nil
		}
		return c.owns(s, next, i)
	})
	if err != nil {
		t.Fatalf("redistest: Failover of primary %d to %s: %v", i, next.Addr(), err)
	}
}

// Promote makes the first replica of Primaries[i] its primary with a
// manual CLUSTER FAILOVER (the replica first catches up, nothing is lost),
// blocking until every node agrees (at most 15s). The old primary becomes
// its replica.
func (c *Cluster) Promote(t testing.TB, i int) {
	t.Helper()
	if len(c.Replicas[i]) == 0 {
		t.Fatalf("redistest: Promote: primary %d has no replica", i)
	}
	old, next := c.Primaries[i], c.Replicas[i][0]
	if err := call(next, "CLUSTER", "FAILOVER"); err != nil {
		t.Fatalf("redistest: Promote: %v", err)
	}
	c.Primaries[i], c.Replicas[i] = next, append(c.Replicas[i][1:], old)
	if err := c.await(func(s *Server) error { return c.owns(s, next, i) }); err != nil {
		t.Fatalf("redistest: Promote of %s: %v", next.Addr(), err)
	}
}

// MoveSlot migrates hash slot sl from Primaries[from] to Primaries[to] as
// redis-cli --cluster reshard does: IMPORTING on the target, MIGRATING on
// the source, its keys moved one MIGRATE at a time (between moves, each
// key lives on one side: clients get ASK or TRYAGAIN, for at least pause
// after each move), then SETSLOT NODE on every primary, and waits until
// every running node, replicas included, sees Primaries[to] serve the slot
// (at most 15s): a replica that still saw the old owner would claim the
// slot back if it took over. Shard no longer tells where the slot's keys
// are.
func (c *Cluster) MoveSlot(t testing.TB, sl, from, to int, pause time.Duration) {
	t.Helper()
	src, dst := c.Primaries[from], c.Primaries[to]
	steps := [][]any{
		{dst, "CLUSTER", "SETSLOT", sl, "IMPORTING", c.ids[src]},
		{src, "CLUSTER", "SETSLOT", sl, "MIGRATING", c.ids[dst]},
	}
	for _, st := range steps {
		if err := call(st[0].(*Server), st[1:]...); err != nil {
			t.Fatalf("redistest: MoveSlot: %v", err)
		}
	}
	for range 100_000 { // bounded: the slot's keys, one at a time
		keys, err := do(src, "CLUSTER", "GETKEYSINSLOT", sl, 1)
		if err != nil {
			t.Fatalf("redistest: MoveSlot: %v", err)
		}
		if len(keys.([]any)) == 0 {
			break
		}
		key := keys.([]any)[0]
		if err := call(src, "MIGRATE", "127.0.0.1", dst.Port(), "", 0, 5000, "KEYS", key); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			t.Fatalf("redistest: MoveSlot: %v", err)
		}
		time.Sleep(pause) // the fault's length: the slot stays split meanwhile
	}
	for _, s := range append([]*Server{dst, src}, c.Primaries...) {
		if err := call(s, "CLUSTER", "SETSLOT", sl, "NODE", c.ids[dst]); err != nil {
			t.Fatalf("redistest: MoveSlot: %v", err)
		}
	}
	err := c.await(func(s *Server) error {
		if !s.Running() {
			return nil
		}
		return c.serves(s, dst, sl)
	})
	if err != nil {
		t.Fatalf("redistest: MoveSlot of slot %d to %s: %v", sl, dst.Addr(), err)
	}
}

// AwaitHealthy blocks until every running node of the Cluster reports
// cluster_state ok (at most 15s), e.g. after a restart.
func (c *Cluster) AwaitHealthy(t testing.TB) {
	t.Helper()
	err := c.await(func(s *Server) error {
		if !s.Running() {
			return nil
		}
		return stateOK(s)
	})
	if err != nil {
		t.Fatalf("redistest: Cluster %v not healthy: %v", c.Addrs(), err)
	}
}
