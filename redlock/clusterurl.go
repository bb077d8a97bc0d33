package redlock

import (
	"crypto/tls"
	"strings"
	"time"

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

// clusterOptions returns the options of a Cluster URL (see clusterURL),
// with NewFromURLs's settings where the URL leaves them unset, and no
// redirects followed (docs/operations.md, "Sentinel and Cluster clients as
// nodes").
func (c *config) clusterOptions(plain string) (*redis.ClusterOptions, error) {
	o, err := redis.ParseClusterURL(plain)
	if err != nil {
		return nil, err
	}
	c.lockSettings(&o.TLSConfig, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.MaxRetries, &o.DialerRetries)
	if o.MaxRedirects == 0 {
		o.MaxRedirects = -1
	}
	return o, nil
}

// seedClient returns a client of the one server at addr, a seed of the
// Cluster options o, connecting as the Cluster client would (o.NewClient).
func seedClient(o *redis.ClusterOptions, addr string) *redis.Client {
	return o.NewClient(&redis.Options{
		Addr: addr, ClientName: o.ClientName, Dialer: o.Dialer, Protocol: o.Protocol,
		Username: o.Username, Password: o.Password, CredentialsProvider: o.CredentialsProvider,
		DialTimeout: o.DialTimeout, DialerRetries: o.DialerRetries, ReadTimeout: o.ReadTimeout,
		WriteTimeout: o.WriteTimeout, MaxRetries: o.MaxRetries, TLSConfig: o.TLSConfig, PoolSize: 1,
	})
}

// lockSettings fills in the settings of a client a URL left unset with a
// lock's (see NewFromURLs), and gives a TLS connection WithTLSConfig's.
func (c *config) lockSettings(tlsConf **tls.Config, dial, read, write *time.Duration, retries, dialerRetries *int) {
	if *tlsConf != nil && c.tls != nil {
		t := c.tls.Clone()
		if t.ServerName == "" {
			t.ServerName = (*tlsConf).ServerName
		}
		*tlsConf = t
	}
	for d, v := range map[*time.Duration]time.Duration{dial: urlDialTimeout, read: urlIOTimeout, write: urlIOTimeout} {
		if *d == 0 {
			*d = v
		}
	}
	if *retries == 0 {
		*retries = -1
	}
	if *dialerRetries == 0 {
		*dialerRetries = 1
	}
}
