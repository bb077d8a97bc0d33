// Package construct hands the constructors of package mutex's types to
// package redlock without exporting them from mutex, whose public API must
// not mention the internal node set.
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

// Semaphore is mutex's Semaphore constructor, of type
//
//	func(set *engine.Set, name string, limit int, opts ...mutex.Option) *mutex.Semaphore
//
// set like Mutex.
var Semaphore any

// Election is mutex's Election constructor, of type
//
//	func(set *engine.Set, name string, opts ...mutex.Option) *mutex.Election
//
// set like Mutex.
var Election any

// RWMutex is mutex's RWMutex constructor, of type
//
//	func(set *engine.Set, name string, opts ...mutex.Option) *mutex.RWMutex
//
// set like Mutex.
var RWMutex any

// MultiMutex is mutex's constructor of a lock on several names, of type
//
//	func(set *engine.Set, names []string, opts ...mutex.Option) *mutex.Mutex
//
// set like Mutex.
var MultiMutex any

// ResumeMutex is mutex's constructor of a Mutex from a handle, of type
//
//	func(ctx context.Context, set *engine.Set, handle string, opts ...mutex.Option) (*mutex.Mutex, error)
//
// set like Mutex.
var ResumeMutex any

// RecordedMutex is mutex's constructor of a lock whose kind keeps a record
// beside its key (engine.Spec's Record and Conflict), of type
//
//	func(set *engine.Set, name string, kind *engine.Kind, record string, conflict func(stored string) error, opts ...mutex.Option) *mutex.Mutex
//
// for package idempotency; set like Mutex.
var RecordedMutex any

// UnlockWith is a Mutex's UnlockContext with arguments after the release
// script's (engine.Contender.Release), of type
//
//	func(m *mutex.Mutex, ctx context.Context, extra []any) error
//
// set like Mutex.
var UnlockWith any
