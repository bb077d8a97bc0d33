package redlock

import (
	"context"
	"crypto/tls"
	"strings"
	"sync"
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

// slotRace makes the Cluster client of one Cluster URL take its slot map
// from whichever server answers CLUSTER SLOTS first: the server go-redis
// asks and, at the same time, every other seed of the URL. go-redis asks
// one server at a time, waiting its read timeout on a hung one, and a
// client without a slot map (a new one) holds every command behind that
// load: one hung shard would fail its node for the names of every shard.
// Asks still out once one answered go on until their answer, their client's
// read timeout or Close, which waits for them.
type slotRace struct {
	seeds  []*redis.Client // the URL's, made before the race's hook exists
	mu     sync.Mutex
	closed bool
	asks   sync.WaitGroup
}

// raceSlotMaps makes every per-server client that o's Cluster client makes
// race the URL's seeds for the slot map; seeds must not be made by o after.
func raceSlotMaps(o *redis.ClusterOptions, seeds []*redis.Client) *slotRace {
	r := &slotRace{seeds: seeds}
	newClient := o.NewClient
	o.NewClient = func(opt *redis.Options) *redis.Client {
		c := newClient(opt)
		c.AddHook(slotRaceHook{r: r, addr: opt.Addr})
		return c
	}
	return r
}

// close makes the hooks ask no other seed from now on and waits for the
// asks still out; call it once the clients are closed.
func (r *slotRace) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.asks.Wait()
}

type slotRaceHook struct {
	r    *slotRace
	addr string // the server of the client the hook is on
}

func (h slotRaceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slotRaceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h slotRaceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		slots, ok := cmd.(*redis.ClusterSlotsCmd)
		if !ok {
			return next(ctx, cmd)
		}
		r := h.r
		others := make([]*redis.Client, 0, len(r.seeds))
		for _, s := range r.seeds {
			if s.Options().Addr != h.addr {
				others = append(others, s)
			}
		}
		r.mu.Lock()
		if r.closed || len(others) == 0 {
			r.mu.Unlock()
			return next(ctx, cmd)
		}
		r.asks.Add(1 + len(others))
		r.mu.Unlock()
		type answer struct {
			slots []redis.ClusterSlot
			err   error
		}
		answers := make(chan answer, 1+len(others))
		ask := func(process redis.ProcessHook) {
			defer r.asks.Done()
			c := redis.NewClusterSlotsCmd(ctx, cmd.Args()...)
			_ = process(ctx, c)
			answers <- answer{c.Val(), c.Err()}
		}
		go ask(next)
		for _, s := range others {
			go ask(s.Process)
		}
		var first error
		for range 1 + len(others) {
			a := <-answers
			if a.err == nil {
				slots.SetVal(a.slots)
				return nil
			}
			if first == nil {
				first = a.err
			}
		}
		return first
	}
}
