// Package construct hands the constructor of mutex.Mutex to package redlock
// without exporting it from mutex, whose public API must not mention the
// internal node set.
//
// Package mutex sets [Mutex] in an init func; package redlock, which imports
// mutex (so that init has run before any of redlock's code), calls it.
package construct

// Mutex is mutex's constructor, of type
//
//	func(set *engine.Set, name string, opts ...mutex.Option) *mutex.Mutex
//
// held as any because this package cannot import mutex (mutex imports it).
// It is set once, by mutex's init func, and only read afterwards.
var Mutex any
