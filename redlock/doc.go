// Package redlock is where quorumlock starts: a set of N independent Redis
// primaries ([New]) and the locks taken on a majority of them
// ([Redlock.NewMutex]), following the Redlock algorithm published by Redis.
//
//	rs, err := redlock.New([]redis.UniversalClient{a, b, c, d, e})
//	m := rs.NewMutex("orders:42", mutex.WithTTL(8*time.Second))
//	if err := m.LockContext(ctx); err != nil { ... }
//	// ... work that ends before m.Until() ...
//	if err := m.UnlockContext(ctx); errors.Is(err, mutex.ErrNotHeld) {
//		// the lock expired or passed to another owner first: reconcile
//	}
//
// Each lock is the key "<prefix><name>" holding a random token on each node,
// set with the semantics of SET key token NX PX ttl. A lock is obtained when a
// majority (N/2+1) of the configured nodes took it and validity remains:
//
//	validity = ttl - elapsed - (ttl*driftFactor + 2ms)
//
// so a minority of nodes may be down, paused, slow or failed over without
// stopping anyone, and without letting two owners in.
//
// What this does not guarantee (see docs/design.md): a holder paused longer
// than the validity (a GC pause, a stopped VM) may still act after another
// owner got the lock; a node whose clock jumps forward may expire a key early;
// a node restarted without persistence forgets the keys it granted. The
// validity in [mutex.Mutex.Until] is the budget for the first, with
// [mutex.WithAutoExtend] and [mutex.Mutex.Lost] to keep and watch it;
// [mutex.WithFencing] lets the protected resource refuse a holder that
// overran it; [WithRestartQuarantine] covers the last. [Redlock.Check]
// reports node settings that lose locks (an evicting maxmemory-policy, weak
// persistence, a replica, a server listed twice) before they do.
package redlock
