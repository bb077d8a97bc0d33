// Package redistest starts real redis-server processes for tests and lets
// those tests inject faults into them.
//
// [Start] launches n independent servers, each bound to 127.0.0.1 on a free
// port and working in its own t.TempDir(). It blocks until every server
// answers PING and registers a t.Cleanup that kills every process it started
// and closes every client made through [Server.Client]. The faults a test can
// inject are:
//
//   - [Server.Kill]: SIGKILL; the port refuses connections afterwards.
//   - [Server.Pause] / [Server.Resume]: SIGSTOP / SIGCONT; while paused the
//     kernel still accepts TCP connections but nothing is answered.
//   - [Server.Restart]: kill, then a fresh process on the same port and
//     directory; data survives only with [WithAOF].
//   - [Server.RestartEmpty]: like Restart, but always with no data.
//
// [StartClusters] launches independent Redis Clusters the same way (each
// node one such server, in cluster mode) and forms them: slots spread evenly
// over the primaries, replicas attached. [Cluster.Failover] kills a primary
// and promotes its replica; Restart and RestartEmpty keep a Cluster node's
// identity and slots (its nodes.conf).
//
// The redis-server binary is found with [Require]: the REDIS_SERVER
// environment variable names it, otherwise it is looked up in PATH. When it is
// missing the test is skipped, unless REDLOCK_REQUIRE_REDIS=1 is set, in which
// case the test fails.
//
// The package only ever signals processes it started, by their own pid. On
// Linux each server also gets SIGKILL from the kernel when the test binary
// dies, so no server outlives the test run. No goroutine of this package
// outlives the cleanup of the test that started the servers, so test suites
// can use go.uber.org/goleak.
//
// Methods of [Server] are safe for concurrent use. They report failures with
// Fatalf on the testing.TB given to [Start], so, like testing.T.FailNow, a
// failing call stops the goroutine it was made on; call them from the test
// goroutine when a failure must stop the test.
package redistest
