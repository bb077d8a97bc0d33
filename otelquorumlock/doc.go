// Package otelquorumlock reports what quorumlock's locks do as OpenTelemetry
// metrics and spans: give [NewObserver] to redlock.New.
//
//	rs, err := redlock.New(clients, redlock.WithObserver(otelquorumlock.NewObserver()))
//
// Metrics (OpenTelemetry names; a Prometheus exporter adds unit suffixes and
// underscores, e.g. quorumlock_release_validity_left_seconds):
//
//   - quorumlock.acquire.duration (histogram, s): each Lock, TryLock or
//     Acquire call, with quorumlock.outcome (obtained, busy, unavailable,
//     canceled) and quorumlock.primitive (mutex, semaphore, rwmutex.read,
//     rwmutex.write, multi, idempotency: an idempotency.Store's lock on a key);
//   - quorumlock.acquire.attempts (histogram, {attempt}): their attempts;
//   - quorumlock.hold.duration (histogram, s), recorded by each unlock
//     that ends an acquisition (a lock that Close releases is counted in
//     quorumlock.lease.lost, cause closed, instead);
//   - quorumlock.release.validity_left (histogram, s): the validity left
//     when that unlock started, negative when the work overran it;
//   - quorumlock.lease.lost (counter, {lease}) with quorumlock.cause
//     (not_held, unavailable, closed, expired);
//   - quorumlock.node.errors (counter, {error}) with server.address,
//     server.port and error.type (timeout, connection, reply, other, or a
//     Redis error code such as READONLY);
//   - quorumlock.node.quarantined (up-down counter, {node}), per node;
//   - quorumlock.waiters (up-down counter, {waiter}): calls waiting for a
//     lock held by another owner, per primitive.
//
// Spans: one per call, named quorumlock.lock, quorumlock.trylock,
// quorumlock.extend or quorumlock.unlock, a child of the caller's ctx, with
// the primitive, outcome, attempts and failed nodes as attributes.
//
// Lock names are never attributes, of metrics or spans, nor in span status
// messages (errors name the lock), unless [WithLockNameAttribute] asks: one
// label value per order or user breaks a metrics backend. Alert rules for
// these metrics are in docs/operations.md, "What to monitor".
package otelquorumlock
