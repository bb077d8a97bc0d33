package node

import (
	"crypto/fips140"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strings"
	"sync"
)

// Script is one of the library's Lua scripts. Its SHA-1 digest is computed
// here at first use, outside FIPS 140 mode only: in that mode (where
// crypto/sha1 may refuse to run) the node's own SCRIPT LOAD reports it.
type Script struct {
	name   string
	src    string
	unique bool // made by Unique: a NOSCRIPT for it is a sign of a restart
	mu     sync.Mutex
	sha    string // "" until computed or reported by a node

	srcArg, boxedSHA any // src and sha as command arguments, boxed once
}

// NewScript returns a script named name (for errors) with source src.
func NewScript(name, src string) *Script { return &Script{name: name, src: src, srcArg: src} }

// Name returns the script's name.
func (s *Script) Name() string { return s.name }

func (s *Script) digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sha == "" && !fips140.Enabled() {
		sum := sha1.Sum([]byte(s.src))
		s.sha = hex.EncodeToString(sum[:])
		s.boxedSHA = s.sha
	}
	return s.sha
}

func (s *Script) learn(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sha == "" {
		s.sha, s.boxedSHA = sha, sha
	}
}

// shaArg returns the digest as a command argument.
func (s *Script) shaArg() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxedSHA
}

// The scripts, from lua/; each file documents its keys, arguments and reply.
var (
	//go:embed lua/lib.lua
	libSrc string
	//go:embed lua/acquire.lua
	acquireBody string
	//go:embed lua/release.lua
	releaseBody string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/fence.lua
	fenceBody string

	// AcquireScript takes a lock key for a token (acquire.lua).
	AcquireScript = NewScript("acquire", withLib(acquireBody))
	// ReleaseScript deletes a lock key held by a token (release.lua).
	ReleaseScript = NewScript("release", withLib(releaseBody))
	// RenewScript extends, and may restore, many lock keys (renew.lua).
	RenewScript = NewScript("renew", withLib(renewSrc))
	// FenceScript writes a fencing number back to a node (fence.lua).
	FenceScript = NewScript("fence", withLib(fenceBody))
)

// The scripts of a lock on several keys at once.
var (
	//go:embed lua/multiacquire.lua
	multiAcquireBody string
	//go:embed lua/multirelease.lua
	multiReleaseBody string
	//go:embed lua/multirenew.lua
	multiRenewSrc string

	// MultiAcquireScript takes several lock keys at once (multiacquire.lua).
	MultiAcquireScript = NewScript("multi-acquire", withLib(multiAcquireBody))
	// MultiReleaseScript deletes several lock keys at once (multirelease.lua).
	MultiReleaseScript = NewScript("multi-release", withLib(multiReleaseBody))
	// MultiRenewScript renews leases of several keys each (multirenew.lua).
	MultiRenewScript = NewScript("multi-renew", multiRenewSrc)
)

// The scripts of a semaphore's permit that keeps the semaphore's limit.
var (
	//go:embed lua/permitacquire.lua
	permitAcquireBody string
	//go:embed lua/permitrenew.lua
	permitRenewBody string

	// PermitAcquireScript takes a permit, refused for another limit
	// (permitacquire.lua, around acquire.lua).
	PermitAcquireScript = AroundAcquire("permit-acquire", permitAcquireBody)
	// PermitRenewScript renews many permits and their limit records (permitrenew.lua).
	PermitRenewScript = NewScript("permit-renew", withLib(permitRenewBody))
)

// withLib returns body with the helpers of lib.lua it calls, directly or
// through one another, in lib.lua's order, in front of it or in place of its
// line libMark: a script makes (as closures, on every call) only the helpers
// it may run, and what comes before libMark runs before any is made.
// lib.lua's helpers are separated by blank lines, each one's comment above
// its "local function", and each calls only helpers above it.
func withLib(body string) string {
	head, body, found := strings.Cut(body, libMark)
	if !found {
		head, body = "", head
	}
	helpers := strings.Split(libSrc, "\n\n")
	text, lib := body, ""
	for i := len(helpers) - 1; i >= 0; i-- {
		_, rest, ok := strings.Cut(helpers[i], "local function ")
		name, _, _ := strings.Cut(rest, "(")
		if ok && strings.Contains(text, name+"(") {
			text, lib = text+helpers[i], helpers[i]+"\n\n"+lib
		}
	}
	return head + lib + body
}

// libMark is where withLib puts the helpers when a script has it.
const libMark = "-- lib.lua\n"

// AroundAcquire returns the script named name that runs body, in which
// acquire.lua can be called as the function acquire() (with its KEYS and
// ARGV, which body may edit first), after lib.lua: a kind's acquire script
// that adds a check to the mutex's.
func AroundAcquire(name, body string) *Script {
	_, acquire, _ := strings.Cut(acquireBody, libMark) // without its uncontended case
	return NewScript(name, withLib("local function acquire()\n"+acquire+"end\n"+body))
}

// AroundRelease returns, likewise, the script named name that runs body
// with release.lua as the function release().
func AroundRelease(name, body string) *Script {
	_, release, _ := strings.Cut(releaseBody, libMark) // without its uncontended case
	return NewScript(name, withLib("local function release()\n"+release+"end\n"+body))
}

// The scripts of a lock key that carries metadata.
var (
	//go:embed lua/metaacquire.lua
	metaAcquireBody string
	//go:embed lua/metarelease.lua
	metaReleaseBody string
	//go:embed lua/metaset.lua
	metaSetSrc string

	// MetaAcquireScript takes a lock key and writes its metadata
	// (metaacquire.lua, around acquire.lua).
	MetaAcquireScript = AroundAcquire("meta-acquire", metaAcquireBody)
	// MetaReleaseScript deletes a lock key and its metadata (metarelease.lua,
	// around release.lua).
	MetaReleaseScript = AroundRelease("meta-release", metaReleaseBody)
	// MetaSetScript replaces a held lock key's metadata (metaset.lua).
	MetaSetScript = NewScript("meta-set", metaSetSrc)
)

// The scripts of a read-write lock's read and write holds.
var (
	//go:embed lua/rwlib.lua
	rwLibSrc string
	//go:embed lua/rwacquire.lua
	rwAcquireBody string
	//go:embed lua/rwrelease.lua
	rwReleaseBody string
	//go:embed lua/rwrenew.lua
	rwRenewBody string
	//go:embed lua/rwfence.lua
	rwFenceBody string

	// ReadAcquireScript and WriteAcquireScript take a read or write hold (rwacquire.lua).
	ReadAcquireScript  = rwScript("read-acquire", "r", rwAcquireBody)
	WriteAcquireScript = rwScript("write-acquire", "w", rwAcquireBody)
	// ReadReleaseScript and WriteReleaseScript release one (rwrelease.lua).
	ReadReleaseScript  = rwScript("read-release", "r", rwReleaseBody)
	WriteReleaseScript = rwScript("write-release", "w", rwReleaseBody)
	// ReadRenewScript and WriteRenewScript renew many (rwrenew.lua).
	ReadRenewScript  = rwScript("read-renew", "r", rwRenewBody)
	WriteRenewScript = rwScript("write-renew", "w", rwRenewBody)
	// RWFenceScript writes a fencing number back for either (rwfence.lua).
	RWFenceScript = rwScript("rw-fence", "r", rwFenceBody)
)

// rwScript returns a read-write lock's script for mode "r" or "w": what
// body has before libMark runs before any helper is made.
func rwScript(name, mode, body string) *Script {
	head, rest, found := strings.Cut(body, libMark)
	if !found {
		head, rest = "", body
	}
	return NewScript(name, withLib("local mode = '"+mode+"'\n"+head+libMark+rwLibSrc+rest))
}

// Unique returns a copy of s made unique by id, so its digest is one
// client's alone: a NOSCRIPT answer to it then means the node lost its
// script cache since that client last ran it, which a restart does, even
// one that reloaded its data.
func (s *Script) Unique(id string) *Script {
	u := NewScript(s.name, s.src+"\n-- client "+id+"\n")
	u.unique = true
	return u
}
