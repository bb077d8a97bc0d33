package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/slot"
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
	return slot.Of(key) * len(c.Primaries) / slot.Count
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

// form joins the Cluster's servers: slots to primaries, a distinct config
// epoch each, MEET, then replicas attached, and waits until it is whole.
func (c *Cluster) form() error {
	all := c.Servers()
	for i, s := range all {
		id, err := do(s, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		c.ids[s] = id.(string)
		if err := call(s, "CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return err
		}
	}
	for i, s := range c.Primaries {
		lo, hi := i*slot.Count/len(c.Primaries), (i+1)*slot.Count/len(c.Primaries)-1
		if err := call(s, "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return err
		}
	}
	for _, s := range all[1:] {
		if err := call(all[0], "CLUSTER", "MEET", "127.0.0.1", s.Port(), s.cfg.busPort); err != nil {
			return err
		}
	}
	err := c.await(func(s *Server) error { return c.knowsAll(s, len(all)) })
	if err != nil {
		return err
	}
	for i, rs := range c.Replicas {
		for _, r := range rs {
			if err := call(r, "CLUSTER", "REPLICATE", c.ids[c.Primaries[i]]); err != nil {
				return err
			}
		}
	}
	return c.await(func(s *Server) error {
		if err := stateOK(s); err != nil {
			return err
		}
		for i, p := range c.Primaries {
			if err := c.owns(s, p, i); err != nil {
				return err
			}
		}
		return replicaUp(s, c.Primaries)
	})
}

// await polls cond on every server of the Cluster until all pass, or fails
// with the last error after clusterTimeout.
func (c *Cluster) await(cond func(*Server) error) error {
	deadline := time.Now().Add(clusterTimeout)
	for {
		var err error
		for _, s := range c.Servers() {
			if err = cond(s); err != nil {
				break
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // the Cluster bus gossips; nothing signals agreement
	}
}

// knowsAll reports an error until s lists n nodes, every one connected.
func (c *Cluster) knowsAll(s *Server, n int) error {
	v, err := do(s, "CLUSTER", "NODES")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(v.(string)), "\n")
	if len(lines) != n {
		return fmt.Errorf("%s knows %d nodes of %d", s.Addr(), len(lines), n)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) < 8 || strings.Contains(f[2], "handshake") || f[7] != "connected" {
			return fmt.Errorf("%s: node not joined yet: %s", s.Addr(), l)
		}
	}
	return nil
}

// owns reports an error until s sees primary as the server of the i-th
// range of slots.
func (c *Cluster) owns(s, primary *Server, i int) error {
	v, err := do(s, "CLUSTER", "SHARDS")
	if err != nil {
		return err
	}
	lo := i * slot.Count / len(c.Primaries)
	for _, shard := range v.([]any) {
		info := pairs(shard)
		slots, _ := info["slots"].([]any)
		if len(slots) == 0 || fmt.Sprint(slots[0]) != strconv.Itoa(lo) {
			continue
		}
		for _, nd := range info["nodes"].([]any) {
			n := pairs(nd)
			if n["id"] == c.ids[primary] && n["role"] == "master" && n["health"] == "online" {
				return nil
			}
		}
	}
	return fmt.Errorf("%s does not yet see %s serving slot %d", s.Addr(), primary.Addr(), lo)
}

// pairs reads a RESP2 flat list of field/value pairs.
func pairs(v any) map[string]any {
	m := map[string]any{}
	list, _ := v.([]any)
	for i := 0; i+1 < len(list); i += 2 {
		m[fmt.Sprint(list[i])] = list[i+1]
	}
	return m
}

// stateOK reports an error until s says cluster_state:ok.
func stateOK(s *Server) error {
	v, err := do(s, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if !strings.Contains(v.(string), "cluster_state:ok") {
		return fmt.Errorf("%s: cluster_state not ok", s.Addr())
	}
	return nil
}

// replicaUp reports an error until s, if a replica, has its link up.
func replicaUp(s *Server, primaries []*Server) error {
	for _, p := range primaries {
		if p == s {
			return nil
		}
	}
	v, err := do(s, "INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(v.(string), "master_link_status:up") {
		return fmt.Errorf("%s: replication link not up", s.Addr())
	}
	return nil
}

// do runs one command on s over a short-lived connection and returns its
// reply, or its error (redis.Nil included).
func do(s *Server, args ...any) (any, error) {
	cl := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.cfg.Password, DialTimeout: doTimeout,
		ReadTimeout: doTimeout, WriteTimeout: doTimeout, MaxRetries: -1, PoolSize: 1, Protocol: 2})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	v, err := cl.Do(ctx, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("%v on %s: %w", args, s.Addr(), err)
	}
	return v, nil
}

// call is do for a command whose reply does not matter.
func call(s *Server, args ...any) error {
	_, err := do(s, args...)
	return err
}
