package engine

import (
	"sync"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Kind is what a primitive brings to the engine: its Lua scripts, each
// keeping the contract of the mutex's script it stands for (KEYS, ARGV and
// reply as documented in internal/node/lua), so that the engine can count
// their votes, roll back, queue waiters, renew and release. See
// docs/design.md, "Adding a primitive".
type Kind struct {
	Name    string       // the primitive, as users call it: "mutex"
	Acquire *node.Script // as acquire.lua
	Release *node.Script // as release.lua
	Renew   *node.Script // as renew.lua: many keys per call
}

// Mutex is the kind of package mutex's locks.
var Mutex = &Kind{Name: "mutex", Acquire: node.AcquireScript, Release: node.ReleaseScript, Renew: node.RenewScript}

// uniqueScripts holds a set's own copies of the acquire scripts, for the
// restart quarantine (see node.Script.Unique).
type uniqueScripts struct {
	mu     sync.Mutex
	id     string
	copies map[*node.Script]*node.Script
}

// acquireScript returns the acquire script of k this set runs: with the
// restart quarantine on, a copy of its own, so that NOSCRIPT for it reveals
// a restart to this set alone.
func (s *Set) acquireScript(k *Kind) *node.Script {
	if s.Quarantine == 0 {
		return k.Acquire
	}
	u := &s.unique
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.copies == nil {
		u.id, u.copies = node.NewToken(), map[*node.Script]*node.Script{}
	}
	c := u.copies[k.Acquire]
	if c == nil {
		c = k.Acquire.Unique(u.id)
		u.copies[k.Acquire] = c
	}
	return c
}
