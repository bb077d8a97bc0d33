// Package quorumlocktest runs in-process Redis nodes for tests of code that
// uses quorumlock, and injects into them the faults that code must survive:
//
//	nodes := quorumlocktest.Start(t, 5)           // torn down at t.Cleanup
//	rs := nodes.Redlock(redlock.WithKeyPrefix("app:"))
//	nodes.Stop(i); nodes.Start(i)                 // fails connections at once; back with its data
//	nodes.Restart(i)                              // back empty: every lock key forgotten
//	nodes.Hang(i); nodes.Unhang(i)                // accepts commands, answers none
//	nodes.FastForward(d)                          // every key on every node ages by d
//
// Each fault is what the library sees from a real server in that state:
// [Nodes.Stop] gives connection errors at once (a majority stopped:
// mutex.ErrNodesUnavailable within the per-node timeout); [Nodes.Hang] gives
// per-node timeouts (a majority hung: calls return when their ctx ends);
// [Nodes.Restart] loses data, which a lease notices once a majority lost
// its key (Lost closes, mutex.ErrNotHeld; see Restart for the grants still
// on their way) and redlock.WithRestartQuarantine detects;
// [Nodes.FastForward] expires keys without sleeping, so a holder finds its
// lock gone. Every primitive works on the nodes (Mutex, Semaphore, RWMutex,
// the multi-name lock, the election, metadata, handles, the idempotency
// store), as on redis-server: the library's own suite runs the same
// contract tests on both.
//
// Each node is a miniredis (github.com/alicebob/miniredis/v2) behind a TCP
// proxy on its own 127.0.0.1 port, which keeps its address across faults:
// no redis-server binary and no network beyond loopback. Tests using it may
// call t.Parallel, and no goroutine of the kit outlives the test's cleanup
// (hung connections included). Start, lock, unlock and tear down of 5 nodes
// takes about 6ms (BenchmarkStartLockUnlockTeardown on 2 CPU cores), 10 to
// 14ms with the cores busy with other work: the first lock loads the
// scripts, and miniredis runs each in a fresh Lua interpreter.
//
// # Where miniredis differs from Redis
//
// The kit makes miniredis answer what the library reads of a server:
//   - INFO server: miniredis has none; the kit answers run_id (new at every
//     Restart) and uptime_in_seconds, which the restart quarantine reads.
//   - Expiry: miniredis ages keys only on FastForward; the kit makes TTLs
//     run down in real time too, as on Redis.
//   - TIME, which the scripts read: FastForward moves it (and the uptime)
//     by d, as if d had passed on the nodes. The clients' clocks do not
//     move: a holder's Until stays, and a node set met before a
//     FastForward keeps the quarantine it computed then (FastForward(d)
//     before the first lock starts a quarantined set with nodes up for d).
//
// What stays different: a stopped node accepts and resets connections where
// a killed server refuses them (the kit keeps the port, so nothing else can
// take it); Restart is always empty (no AOF or snapshot to reload); CONFIG is unknown, so redlock.Check reports less; scripts run on
// gopher-lua, not Redis's Lua, and slower: under -race on a busy machine a
// cold node set's first round can outlast the default per-node timeout, so
// acquire with LockContext and a deadline where a refusal is not what the
// test checks; and miniredis computes SHA-1 script digests, so under
// GODEBUG=fips140=only Start skips the test.
package quorumlocktest
