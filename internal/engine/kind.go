package engine

import "github.com/quorumlock/quorumlock/internal/node"

// Kind is a primitive's scripts, each with the KEYS, ARGV and reply of the
// mutex's it stands for (docs/design.md, "Adding a primitive").
type Kind struct {
	Name    string       // the primitive, as users call it: "mutex"
	Acquire *node.Script // as acquire.lua
	Release *node.Script // as release.lua
	Renew   *node.Script // as renew.lua: many leases per call
	Fence   *node.Script // as fence.lua; nil: fence.lua
	// OneRecordRefuses: an attempt hears every node and fails, won or not,
	// if one refuses it for the record (an idempotency key's).
	OneRecordRefuses bool
}

// The kinds of package mutex's locks.
var (
	// MutexKind is a lock on one name: a key holding the token.
	MutexKind = &Kind{Name: "mutex", Acquire: node.AcquireScript, Release: node.ReleaseScript, Renew: node.RenewScript}
	// MultiKind is a lock on several names at once, each key with its queue.
	MultiKind = &Kind{Name: "multi", Acquire: node.MultiAcquireScript, Release: node.MultiReleaseScript, Renew: node.MultiRenewScript}
	// PermitKind is a semaphore's permit, refused for another limit (Spec.Record).
	PermitKind = &Kind{Name: "permit", Acquire: node.PermitAcquireScript, Release: node.ReleaseScript, Renew: node.PermitRenewScript}
	// MetaKind is a Mutex with metadata in a record beside its key (Spec.Metadata).
	MetaKind = &Kind{Name: "mutex.meta", Acquire: node.MetaAcquireScript, Release: node.MetaReleaseScript, Renew: node.PermitRenewScript}
	// RWReadKind and RWWriteKind are a read-write lock's holds on one hash key.
	RWReadKind  = &Kind{Name: "rwmutex.read", Acquire: node.ReadAcquireScript, Release: node.ReadReleaseScript, Renew: node.ReadRenewScript, Fence: node.RWFenceScript}
	RWWriteKind = &Kind{Name: "rwmutex.write", Acquire: node.WriteAcquireScript, Release: node.WriteReleaseScript, Renew: node.WriteRenewScript, Fence: node.RWFenceScript}
)

// acquireScript is k's acquire script as this set runs it: with the
// quarantine on, its own copy, whose NOSCRIPT reveals a restart to it alone.
func (s *Set) acquireScript(k *Kind) *node.Script {
	if s.Quarantine == 0 {
		return k.Acquire
	}
	c, ok := s.unique.Load(k.Acquire)
	if !ok {
		c, _ = s.unique.LoadOrStore(k.Acquire, k.Acquire.Unique(node.NewToken()))
	}
	return c.(*node.Script)
}
