package node

import (
	_ "embed"
	"sync"
)

// Script is one of the library's Lua scripts. Its SHA-1 digest is never
// computed here: the node's own SCRIPT LOAD reports it, so a process in
// FIPS 140-only mode, where crypto/sha1 refuses to run, can use it.
type Script struct {
	name string
	src  string
	mu   sync.Mutex
	sha  string // "" until a node reported it

	srcArg, boxedSHA any // src and sha as command arguments, boxed once
}

// NewScript returns a script named name (for errors) with source src.
func NewScript(name, src string) *Script { return &Script{name: name, src: src, srcArg: src} }

// Name returns the script's name.
func (s *Script) Name() string { return s.name }

func (s *Script) digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	acquireSrc  = libSrc + acquireBody
	releaseSrc  = libSrc + releaseBody
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/fence.lua
	fenceSrc string

	// AcquireScript takes a lock key for a token (acquire.lua).
	AcquireScript = NewScript("acquire", acquireSrc)
	// ReleaseScript deletes a lock key held by a token (release.lua).
	ReleaseScript = NewScript("release", releaseSrc)
	// RenewScript extends, and may restore, many lock keys (renew.lua).
	RenewScript = NewScript("renew", renewSrc)
	// FenceScript writes a fencing number back to a node (fence.lua).
	FenceScript = NewScript("fence", fenceSrc)
)

// Unique returns a copy of s made unique by id, so its digest is one
// client's alone: a NOSCRIPT answer to it then means the node lost its
// script cache since that client last ran it, which a restart does, even
// one that reloaded its data.
func (s *Script) Unique(id string) *Script {
	return NewScript(s.name, s.src+"\n-- client "+id+"\n")
}
