package quorumlocktest

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/construct"
	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/redlock"
)

// Nodes is a set of in-process Redis nodes for one test. Its methods are
// safe for concurrent use; they report failures with t.Fatalf, so call them
// from the test's goroutine. A Nodes not made by [Start] (nil or zero) has
// no test to fail: its methods panic, saying so; its URLs are none.
type Nodes struct {
	t     testing.TB
	mu    sync.Mutex // serialises faults; each node's state is its own
	nodes []*kitNode
	sets  []*engine.Set // of the node sets made by Redlock (mu)
}

type kitNode struct {
	front   *front
	backend *backend
}

// Start starts n nodes, each on a loopback port of its own, and stops them
// at t's cleanup, after the node sets made by [Nodes.Redlock] are closed.
// It needs no redis-server. In FIPS 140-only mode (GODEBUG=fips140=only) it
// skips t: miniredis computes SHA-1 digests of scripts, which that mode
// refuses.
func Start(t testing.TB, n int) *Nodes {
	if t == nil {
		panic("quorumlocktest: Start: nil testing.TB; pass the test's t")
	}
	t.Helper()
	if strings.Contains(os.Getenv("GODEBUG"), "fips140=only") {
		t.Skip("quorumlocktest: miniredis computes SHA-1, which GODEBUG=fips140=only refuses")
	}
	if n < 1 {
		t.Fatalf("quorumlocktest: Start(%d): need at least one node", n)
	}
	ns := &Nodes{t: t}
	t.Cleanup(ns.close)
	for range n {
		b, err := newBackend()
		if err != nil {
			t.Fatal(err)
		}
		f, err := newFront(b.m.Addr())
		if err != nil {
			b.close()
			t.Fatalf("quorumlocktest: listening on loopback: %v", err)
		}
		ns.nodes = append(ns.nodes, &kitNode{front: f, backend: b})
	}
	return ns
}

func (ns *Nodes) close() {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, k := range ns.nodes {
		k.front.close()
		k.backend.close()
	}
}

// URLs returns the nodes' redis:// URLs, in order, for redlock.NewFromURLs
// and code that dials the nodes itself. They stay valid across every fault.
func (ns *Nodes) URLs() []string {
	if ns == nil {
		return nil
	}
	urls := make([]string, len(ns.nodes))
	for i, k := range ns.nodes {
		urls[i] = "redis://" + k.front.addr
	}
	return urls
}

// Redlock returns a node set on the nodes, built with redlock.NewFromURLs
// on [Nodes.URLs] and opts (so its clients have that function's timeouts),
// and closed at t's cleanup. Invalid opts fail the test.
func (ns *Nodes) Redlock(opts ...redlock.Option) *redlock.Redlock {
	ns.test("Redlock").Helper()
	rs, err := redlock.NewFromURLs(context.Background(), ns.URLs(), opts...)
	if err != nil {
		ns.t.Fatalf("quorumlocktest: %v", err)
	}
	ns.t.Cleanup(func() { _ = rs.Close() })
	ns.mu.Lock()
	ns.sets = append(ns.sets, construct.NodeSet.(func(*redlock.Redlock) *engine.Set)(rs))
	ns.mu.Unlock()
	return rs
}

// test returns ns's test; on a Nodes not made by Start, which has none to
// fail, it panics with what to do.
func (ns *Nodes) test(op string) testing.TB {
	if ns == nil || ns.t == nil {
		panic("quorumlocktest: " + op + " on a Nodes not made by Start; get one from quorumlocktest.Start(t, n)")
	}
	return ns.t
}

// node returns node i, failing the test for an index out of range.
func (ns *Nodes) node(op string, i int) *kitNode {
	ns.test(op).Helper()
	if i < 0 || i >= len(ns.nodes) {
		ns.t.Fatalf("quorumlocktest: %s(%d): there are nodes 0 to %d", op, i, len(ns.nodes)-1)
	}
	return ns.nodes[i]
}

// Stop makes node i fail every connection at once and drops those it had,
// as a killed server; it keeps its data for [Nodes.Start]. It ends a
// [Nodes.Hang]. (A killed server refuses connections; the kit accepts and
// resets them, so that no other socket takes its port meanwhile.) go-redis
// logs each failed dial to it on stderr ("connection pool: failed to dial"),
// through its own logger, not the test's; redis.SetLogger silences it.
func (ns *Nodes) Stop(i int) {
	ns.test("Stop").Helper()
	k := ns.node("Stop", i)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	k.front.stop("")
}

// Start brings a stopped node i back on its address with the data it had.
// It does nothing to a running node.
func (ns *Nodes) Start(i int) {
	ns.test("Start").Helper()
	k := ns.node("Start", i)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	k.front.start()
}

// Restart stops node i and brings it back empty on its address, as a server
// restarted without persistence: every key and loaded script is gone, and
// INFO shows a new run_id and an uptime from now, so
// redlock.WithRestartQuarantine detects it. As on Redis, a command that had
// not reached the node yet runs on the empty node: a lock call returns once
// a majority granted it, and the other nodes' grants may still be on their
// way, so restarting a majority right after it can leave the key on a
// majority, and the lease held. A lease renewed between two Restarts
// survives them too. To empty a majority under a lease, first wait until
// redlock's Inspect shows its token on every node, then Hang the nodes,
// then Restart them.
func (ns *Nodes) Restart(i int) {
	ns.test("Restart").Helper()
	k := ns.node("Restart", i)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	b, err := newBackend()
	if err != nil {
		ns.t.Fatal(err)
	}
	k.front.stop(b.m.Addr())
	k.backend.close()
	k.backend = b
	k.front.start()
}

// Hang makes node i accept connections and commands and answer none, as a
// paused server, until [Nodes.Unhang]; commands sent meanwhile run then.
func (ns *Nodes) Hang(i int) {
	ns.test("Hang").Helper()
	ns.node("Hang", i).front.hang()
}

// Unhang lets node i answer again, starting with what it held, and returns
// once the node sets made by [Nodes.Redlock] have read its answers to that
// (at most 2s): a call made then counts the node. (A node set made otherwise
// may still be reading them, as one may a moment after a paused server
// resumes: a call that does not wait, such as TryLockContext, can then find
// the node silent for longer than the per-node timeout and count it as
// failed.)
func (ns *Nodes) Unhang(i int) {
	ns.test("Unhang").Helper()
	k := ns.node("Unhang", i)
	k.front.unhang()
	ns.mu.Lock()
	sets := ns.sets
	ns.mu.Unlock()
	url, bound := ns.URLs()[i], time.After(unhangWait)
	for _, s := range sets {
		for _, n := range s.Nodes {
			if n.Addr() != url {
				continue
			}
			select {
			case <-n.Drained():
			case <-bound:
				return
			}
		}
	}
}

// unhangWait bounds how long Unhang waits for what a node held to be
// answered and read.
const unhangWait = 2 * time.Second

// FastForward ages every key on every node by d, without waiting: a key
// with a TTL of at most d is gone. The nodes' clocks (TIME, uptime) move by
// d too; the clients' clocks do not.
func (ns *Nodes) FastForward(d time.Duration) {
	ns.test("FastForward").Helper()
	if d < 0 {
		ns.t.Fatalf("quorumlocktest: FastForward(%v): negative", d)
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, k := range ns.nodes {
		k.backend.fastForward(d)
	}
}
