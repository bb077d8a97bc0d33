// Package demotest gives the examples' tests the nodes they run on: the
// embedded nodes each program starts without -nodes, and real redis-server
// processes, as a deployment has.
package demotest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Backends returns, by subtest name, functions giving the URLs of the nodes
// a test runs on: 5 embedded nodes, as the programs start by default
// (demo.URLs), or 3 real redis-servers (internal/redistest, skipped where
// redis-server is missing unless REDLOCK_REQUIRE_REDIS is set). Either is
// stopped when the test ends.
func Backends() map[string]func(t *testing.T) []string {
	return map[string]func(t *testing.T) []string{
		"embedded": func(t *testing.T) []string {
			urls, stop, err := demo.URLs("", 5)
			require.NoError(t, err)
			t.Cleanup(stop)
			return urls
		},
		"redis": func(t *testing.T) []string {
			var urls []string
			for _, a := range redistest.Addrs(redistest.Start(t, 3)) {
				urls = append(urls, "redis://"+a)
			}
			return urls
		},
	}
}
