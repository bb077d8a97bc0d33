package netfault

import "testing"

// Mesh is one [Proxy] per (client, node) pair, so that a test can cut some
// clients off from some nodes while the other clients still reach them.
// Clients and nodes are numbered from 0, nodes in the order given to
// [NewMesh]. Its methods are safe for concurrent use.
type Mesh struct {
	t       testing.TB
	proxies [][]*Proxy // [client][node]
}

// NewMesh starts clients × len(nodeAddrs) proxies with [New]: client c
// reaches node n through [Mesh.Proxy](c, n). Each proxy is stopped at t's
// cleanup, as New says. clients must be at least 1 and nodeAddrs not empty;
// otherwise NewMesh fails the test.
func NewMesh(t testing.TB, clients int, nodeAddrs []string) *Mesh {
	t.Helper()
	if clients < 1 || len(nodeAddrs) == 0 {
		t.Fatalf("netfault: NewMesh: %d clients and %d nodes, want at least 1 of each", clients, len(nodeAddrs))
	}
	m := &Mesh{t: t, proxies: make([][]*Proxy, clients)}
	for c := range m.proxies {
		m.proxies[c] = make([]*Proxy, len(nodeAddrs))
		for n, addr := range nodeAddrs {
			m.proxies[c][n] = New(t, addr)
		}
	}
	return m
}

// Proxy returns the proxy through which client reaches node. An index out of
// range fails the test.
func (m *Mesh) Proxy(client, node int) *Proxy {
	m.t.Helper()
	if client < 0 || client >= len(m.proxies) || node < 0 || node >= len(m.proxies[client]) {
		m.t.Fatalf("netfault: Mesh.Proxy(%d, %d): the mesh has %d clients and %d nodes",
			client, node, len(m.proxies), len(m.proxies[0]))
	}
	return m.proxies[client][node]
}

// Addrs returns the addresses client should dial, one per node, in node
// order. They stay the same across [Mesh.Partition] and [Mesh.HealAll].
func (m *Mesh) Addrs(client int) []string {
	m.t.Helper()
	addrs := make([]string, len(m.proxies[0]))
	for n := range addrs {
		addrs[n] = m.Proxy(client, n).Addr()
	}
	return addrs
}

// Partition cuts every listed client off from every listed node, with
// [Proxy.Cut]; the other pairs are untouched. It blocks until all those
// proxies have stopped listening. Cutting a cut pair does nothing.
func (m *Mesh) Partition(clients, nodes []int) {
	m.t.Helper()
	for _, c := range clients {
		for _, n := range nodes {
			m.Proxy(c, n).Cut()
		}
	}
}

// HealAll calls [Proxy.Heal] on every proxy of the mesh, undoing partitions
// and every other fault, and returns once all of them accept connections.
func (m *Mesh) HealAll() {
	m.t.Helper()
	for _, row := range m.proxies {
		for _, p := range row {
			p.Heal()
		}
	}
}
