// Package construct hands the constructors of package mutex's types to
// package redlock without exporting them from mutex, whose public API must
// not mention the internal node set.
//
// Package mutex sets [Mutex] in an init func; package redlock, which imports
// mutex (so that init has run before any of redlock's code), calls it.
package construct

// The constructors of package mutex's types, from a node set (the
// unexported functions behind redlock's NewMutex, NewSemaphore, ...), held
// as any because this package cannot import mutex (mutex imports it); each
// user asserts the function type mutex's init func gives it. Each is set
// once, by that init func, and only read afterwards.
var (
	Mutex, Semaphore, Election, RWMutex, MultiMutex any
	// ResumeMutex makes a Mutex from a handle (redlock's ResumeMutex).
	ResumeMutex any
	// RecordedMutex makes, for package idempotency, a lock whose kind keeps
	// a record beside its key (engine.Spec's Record and Conflict).
	RecordedMutex any
	// UnlockWith is a Mutex's UnlockContext with arguments after the
	// release script's (engine.Contender.Release).
	UnlockWith any
)
