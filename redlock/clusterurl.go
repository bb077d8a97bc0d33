package redlock

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// clusterSchemes are the URL schemes NewFromURLs reads as a Redis Cluster
// node, and the scheme redis.ParseClusterURL knows each as.
var clusterSchemes = map[string]string{"redis+cluster://": "redis://", "rediss+cluster://": "rediss://"}

// clusterURL returns raw in redis.ParseClusterURL's syntax if it names a
// Redis Cluster node ("redis+cluster://host:port?addr=host2:port&addr=...").
func clusterURL(raw string) (string, bool) {
	for scheme, plain := range clusterSchemes {
		if rest, ok := strings.CutPrefix(raw, scheme); ok {
			return plain + rest, true
		}
	}
	return "", false
}

// newClusterClient returns the ClusterClient of a Cluster URL (see
// clusterURL) with NewFromURLs's settings where the URL leaves them unset,
// and no redirects followed (docs/operations.md, "Sentinel and Cluster
// clients as nodes").
func (c *config) newClusterClient(plain string) (*redis.ClusterClient, error) {
	o, err := redis.ParseClusterURL(plain)
	if err != nil {
		return nil, err
	}
	if o.TLSConfig != nil && c.tls != nil {
		t := c.tls.Clone()
		if t.ServerName == "" {
			t.ServerName = o.TLSConfig.ServerName
		}
		o.TLSConfig = t
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = urlDialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = urlIOTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = urlIOTimeout
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	if o.MaxRedirects == 0 {
		o.MaxRedirects = -1
	}
	if o.DialerRetries == 0 {
		o.DialerRetries = 1
	}
	return redis.NewClusterClient(o), nil
}
