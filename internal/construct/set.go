package construct

// NodeSet returns the node set of a *redlock.Redlock, of type
//
//	func(r *redlock.Redlock) *engine.Set
//
// (nil for a nil r), for package idempotency, which runs its own scripts on
// a Redlock's nodes. It is set once, by redlock's init func.
var NodeSet any
