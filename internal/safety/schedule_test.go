package safety_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/netfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// faultCounts counts the faults a schedule injected, by kind.
type faultCounts struct {
	kill, pause, partition, latency, blackhole, reset, restart atomic.Int64
	move, failover                                             atomic.Int64 // Cluster nodes: slot moves, primaries replaced by replicas
}

func (f *faultCounts) total() int64 {
	return f.kill.Load() + f.pause.Load() + f.partition.Load() + f.latency.Load() +
		f.blackhole.Load() + f.reset.Load() + f.restart.Load() + f.move.Load() + f.failover.Load()
}

// cluster is what a chaos run injects faults into: the nodes (the first
// plain, the rest with AOF and appendfsync always) and, between every client
// and every node, a proxy of its own.
type cluster struct {
	servers []*redistest.Server
	aof     []bool
	mesh    *netfault.Mesh
}

// startCluster starts plain and aof redis-server nodes and a proxy mesh for
// clients clients.
func startCluster(t *testing.T, plain, aof, clients int) *cluster {
	t.Helper()
	c := &cluster{}
	c.servers = append(c.servers, redistest.Start(t, plain)...)
	c.servers = append(c.servers, redistest.Start(t, aof, redistest.WithAOF())...)
	for i := range c.servers {
		c.aof = append(c.aof, i >= plain)
	}
	c.mesh = netfault.NewMesh(t, clients, redistest.Addrs(c.servers))
	return c
}

// scheduler injects random faults, at most maxNodeFaults nodes at a time and
// one fault per client-node link at a time, each lasting a random time. All
// randomness comes from one seeded source, so a seed replays the same
// sequence of decisions (the timing of a real machine still varies).
type scheduler struct {
	t      *testing.T
	c      *cluster
	rng    *rand.Rand
	counts *faultCounts

	mu        sync.Mutex
	nodeBusy  []bool
	linkBusy  [][]bool // [client][node]
	nodeFault int
	wg        sync.WaitGroup
}

const maxNodeFaults = 2

func newScheduler(t *testing.T, c *cluster, clients int, seed uint64, counts *faultCounts) *scheduler {
	s := &scheduler{t: t, c: c, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), counts: counts,
		nodeBusy: make([]bool, len(c.servers))}
	for range clients {
		s.linkBusy = append(s.linkBusy, make([]bool, len(c.servers)))
	}
	return s
}

// run injects faults until ctx ends, then waits for every fault to be healed.
// Faults start every 20 to 200ms.
func (s *scheduler) run(ctx context.Context) {
	for {
		if !sleepCtx(ctx, time.Duration(20+s.rng.IntN(180))*time.Millisecond) {
			break
		}
		s.inject(ctx)
	}
	s.wg.Wait()
	s.c.mesh.HealAll()
}

func (s *scheduler) inject(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := time.Duration(50+s.rng.IntN(950)) * time.Millisecond
	switch k := s.rng.IntN(10); {
	case k < 3:
		s.nodeFaultLocked(ctx, d)
	case k < 5:
		s.partitionLocked(d)
	default:
		s.linkFaultLocked(d)
	}
}

// nodeFaultLocked pauses, kills or restarts one free node. A node without
// persistence that is killed stays down longer than the largest TTL before
// it restarts empty, since an immediate empty restart is a known way to let a
// second owner in (see TestEmptyRestartCanAdmitSecondOwner); a node with AOF
// and appendfsync always restarts at once.
func (s *scheduler) nodeFaultLocked(ctx context.Context, d time.Duration) {
	if s.nodeFault >= maxNodeFaults {
		return
	}
	i := s.rng.IntN(len(s.c.servers))
	if s.nodeBusy[i] {
		return
	}
	srv := s.c.servers[i]
	s.nodeBusy[i] = true
	s.nodeFault++
	release := func() {
		s.mu.Lock()
		s.nodeBusy[i] = false
		s.nodeFault--
		s.mu.Unlock()
	}
	kind := s.rng.IntN(3)
	s.wg.Go(func() {
		defer release()
		switch {
		case kind == 0:
			s.counts.pause.Add(1)
			srv.Pause()
			sleepCtx(ctx, d)
			srv.Resume()
		case kind == 1 && s.c.aof[i]:
			s.counts.restart.Add(1)
			srv.Restart() // kill -9, then start again from the AOF
		default:
			s.counts.kill.Add(1)
			srv.Kill()
			time.Sleep(max(d, maxChaosTTL+200*time.Millisecond)) // every key it granted has expired
			s.counts.restart.Add(1)
			if s.c.aof[i] {
				srv.Restart()
			} else {
				srv.RestartEmpty()
			}
		}
	})
}

// partitionLocked cuts a random group of clients off from a random group of
// one to three nodes, while the other clients still reach them.
func (s *scheduler) partitionLocked(d time.Duration) {
	clients := s.rng.Perm(len(s.linkBusy))[:1+s.rng.IntN(len(s.linkBusy)-1)]
	nodes := s.rng.Perm(len(s.c.servers))[:1+s.rng.IntN(3)]
	for _, c := range clients {
		for _, n := range nodes {
			if s.linkBusy[c][n] {
				return
			}
		}
	}
	for _, c := range clients {
		for _, n := range nodes {
			s.linkBusy[c][n] = true
		}
	}
	s.counts.partition.Add(1)
	s.c.mesh.Partition(clients, nodes)
	s.wg.Go(func() {
		time.Sleep(d)
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range clients {
			for _, n := range nodes {
				s.c.mesh.Proxy(c, n).Heal()
				s.linkBusy[c][n] = false
			}
		}
	})
}

// linkFaultLocked slows down, black-holes or resets one client-node link.
func (s *scheduler) linkFaultLocked(d time.Duration) {
	c, n := s.rng.IntN(len(s.linkBusy)), s.rng.IntN(len(s.c.servers))
	if s.linkBusy[c][n] {
		return
	}
	s.linkBusy[c][n] = true
	p := s.c.mesh.Proxy(c, n)
	switch k := s.rng.IntN(4); {
	case k < 2:
		s.counts.latency.Add(1)
		latency := time.Duration(5+s.rng.IntN(75)) * time.Millisecond
		p.Latency(latency, min(latency, time.Duration(s.rng.IntN(20))*time.Millisecond))
	case k == 2:
		s.counts.blackhole.Add(1)
		p.Blackhole()
	default:
		s.counts.reset.Add(1)
		p.ResetPeer()
	}
	s.wg.Go(func() {
		time.Sleep(d)
		s.mu.Lock()
		defer s.mu.Unlock()
		p.Heal()
		s.linkBusy[c][n] = false
	})
}

// sleepCtx sleeps for d or until ctx ends, and reports whether it slept the
// whole time.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
