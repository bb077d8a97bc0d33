package otelquorumlock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/otel/attribute"
)

// Nodes are named by address by redlock.New and by their URL, password
// masked, by redlock.NewFromURLs; either way host and port are told apart.
func TestServerAttributes(t *testing.T) {
	for node, want := range map[string][]attribute.KeyValue{
		"10.0.0.1:6379":                        {attribute.String("server.address", "10.0.0.1"), attribute.Int("server.port", 6379)},
		"redis://10.0.0.1:6380":                {attribute.String("server.address", "10.0.0.1"), attribute.Int("server.port", 6380)},
		"rediss://lock:xxxxx@db.local:6381/0":  {attribute.String("server.address", "db.local"), attribute.Int("server.port", 6381)},
		"[::1]:6379":                           {attribute.String("server.address", "::1"), attribute.Int("server.port", 6379)},
		"failover#2":                           {attribute.String("server.address", "failover#2")},
		"cluster[10.0.0.1:7000 10.0.0.2:7000]": {attribute.String("server.address", "cluster[10.0.0.1:7000 10.0.0.2:7000]")},
	} {
		assert.Equal(t, want, server(node), node)
	}
}
