// Package idempotency runs an operation once per idempotency key, even when
// the request is sent twice, from any process: the first call with a key
// runs the work under a lock of a [redlock.Redlock], its response is
// recorded on a majority of the nodes, and later calls with the key get
// that response back, marked replayed, for a retention period.
//
// [Store.Do] is the core; [Middleware] puts it behind the Idempotency-Key
// HTTP header (draft-ietf-httpapi-idempotency-key-header).
//
// What it promises, and what it cannot: a completed key is replayed, never
// run again, while the nodes that lost or never got its record stay a
// minority; work that fails is not remembered; and a holder paused past its
// lock's validity may overlap the next one, which only the resource can
// refuse, given [FencingToken]. No exactly-once is possible without the
// resource's cooperation. The argument is in docs/design.md, "Idempotency".
package idempotency
