// Package demo gives the examples their nodes: embedded Redis nodes by
// default, so each example runs with nothing but Go, or real servers given as
// URLs with -nodes.
package demo

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/quorumlock/quorumlock/redlock"
)

// NodesFlag registers -nodes on the default flag set: comma-separated node
// URLs (redis://..., rediss://user:pass@host:port/0). Empty means embedded
// nodes.
func NodesFlag() *string {
	return flag.String("nodes", "", "comma-separated Redis node URLs (redis:// or rediss://); empty: 5 embedded nodes")
}

// Nodes returns a node set over the given URLs (comma-separated), or over n
// embedded nodes started in this process when urls is empty, and a function
// that releases everything. Embedded nodes keep the examples runnable with
// only Go; they are not independent machines.
func Nodes(ctx context.Context, urls string, n int, opts ...redlock.Option) (*redlock.Redlock, func(), error) {
	logging.Disable() // go-redis logs each failed dial; the lock reports errors itself
	if urls != "" {
		rs, err := redlock.NewFromURLs(ctx, strings.Split(urls, ","), opts...)
		if rs == nil {
			return nil, nil, err
		}
		if err != nil {
			log.Printf("some nodes did not answer: %v", err)
		}
		return rs, func() { _ = rs.Close() }, nil
	}
	var servers []*miniredis.Miniredis
	var clients []redis.UniversalClient
	stop := func() {
		for _, c := range clients {
			_ = c.Close()
		}
		for _, s := range servers {
			s.Close()
		}
	}
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("starting an embedded node: %w", err)
		}
		servers = append(servers, s)
		clients = append(clients, redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1}))
	}
	rs, err := redlock.New(clients, opts...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return rs, stop, nil
}
