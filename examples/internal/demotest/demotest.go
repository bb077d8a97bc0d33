// Package demotest gives the examples' tests the nodes they run on:
// in-process nodes (quorumlocktest), and real redis-server processes, as a
// deployment has.
package demotest

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/quorumlocktest"
)

// Backends returns, by subtest name, functions giving the URLs of the nodes
// a test runs on: 5 in-process nodes, as many as the programs start by
// default (quorumlocktest), or 3 real redis-servers (internal/redistest,
// skipped where redis-server is missing unless REDLOCK_REQUIRE_REDIS is set).
// Either is stopped when the test ends.
func Backends() map[string]func(t *testing.T) []string {
	return map[string]func(t *testing.T) []string{
		"kit": func(t *testing.T) []string { return quorumlocktest.Start(t, 5).URLs() },
		"redis": func(t *testing.T) []string {
			var urls []string
			for _, a := range redistest.Addrs(redistest.Start(t, 3)) {
				urls = append(urls, "redis://"+a)
			}
			return urls
		},
	}
}
