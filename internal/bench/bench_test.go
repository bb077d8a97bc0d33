package main

import (
	"testing"
)

// BenchmarkLockUnlock measures one uncontended lock+unlock per library, on a
// name of its own, with its allocations:
//
//	go test -bench . -benchmem
//
// It starts five redis-server processes (and the slow proxy, unused here)
// for the run and stops them at its end; without redis-server it is skipped.
// The main program computes the same figures with testing.Benchmark.
func BenchmarkLockUnlock(b *testing.B) {
	libs := benchLibraries(b)
	for _, lib := range libs {
		b.Run(lib.name, benchLockUnlock(b.Context(), lib.direct("bench:allocs:"+lib.name), nil))
	}
}

// BenchmarkNewLockUnlock is BenchmarkLockUnlock with a new lock object per
// lock+unlock, as the second run of scenario 1 measures it.
func BenchmarkNewLockUnlock(b *testing.B) {
	libs := benchLibraries(b)
	for _, lib := range libs {
		b.Run(lib.name, benchNewLockUnlock(b.Context(), lib.direct, "bench:allocs-new:"+lib.name))
	}
}

// benchLibraries starts five redis-server processes (and the slow proxy,
// unused here) and returns the libraries over them, all stopped at the end
// of b; without redis-server it skips b.
func benchLibraries(b *testing.B) []*library {
	b.Helper()
	bin, err := findRedisServer()
	if err != nil {
		b.Skip(err)
	}
	srv, err := startServers(b.Context(), bin, nodes)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			b.Error(err)
		}
	})
	slow, err := startSlowNode(srv.Addrs()[0], defaultSettings().slowDelay)
	if err != nil {
		b.Fatal(err)
	}
	libs, err := newLibraries(srv.Addrs(), slow.Addr())
	if err != nil {
		slow.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() { // runs before the servers' cleanup
		if err := closeLibraries(libs); err != nil {
			b.Error(err)
		}
		slow.Close()
	})
	return libs
}
