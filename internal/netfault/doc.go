// Package netfault injects network faults between tests' clients and Redis
// nodes, with TCP proxies on 127.0.0.1 that run in the test process.
//
// It uses github.com/Shopify/toxiproxy/v2 as a library: no toxiproxy server
// and no HTTP API. [New] puts one [Proxy] in front of one upstream address;
// clients dial [Proxy.Addr] instead of the upstream. The faults are:
//
//   - [Proxy.Latency]: replies are delayed, connections stay up.
//   - [Proxy.Blackhole]: connections are accepted and kept, but nothing is
//     forwarded in either direction; clients see timeouts, not errors.
//   - [Proxy.ResetPeer]: the first bytes sent either way on a connection make
//     the proxy drop them and close the connection.
//   - [Proxy.Cut]: a partition. Open connections are closed and new ones are
//     refused.
//   - [Proxy.Heal]: every fault is removed; a cut proxy listens again on the
//     same address.
//
// [Mesh] holds one proxy per (client, node) pair, so that a test can cut some
// clients off from some nodes while the other clients still reach them.
//
// Every goroutine toxiproxy starts for a proxy carries a runtime/pprof label
// that names the proxy. The t.Cleanup that [New] registers stops the proxy,
// closes its connections and then waits, at most 5s, until no goroutine with
// that label is left; if some are, it fails the test and prints their stacks.
// So no goroutine of this package outlives the test that made the proxy, and
// test suites can use go.uber.org/goleak.
//
// Methods of [Proxy] are safe for concurrent use. Like package redistest's,
// they report failures with Fatalf on the testing.TB given to [New], so a
// failing call stops the goroutine it was made on; call them from the test
// goroutine when a failure must stop the test.
package netfault
