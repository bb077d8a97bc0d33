package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// form joins the Cluster's servers: slots to primaries, a distinct config
// epoch each, MEET, then replicas attached, and waits until it is whole.
func (c *Cluster) form() error {
	all := c.Servers()
	for i, s := range all {
		id, err := do(s, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		c.ids[s] = id.(string)
		if err := call(s, "CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return err
		}
	}
	for i, s := range c.Primaries {
		lo, hi := i*keyspace.Slots/len(c.Primaries), (i+1)*keyspace.Slots/len(c.Primaries)-1
		if err := call(s, "CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return err
		}
	}
	for _, s := range all[1:] {
		if err := call(all[0], "CLUSTER", "MEET", "127.0.0.1", s.Port(), s.cfg.busPort); err != nil {
			return err
		}
	}
	err := c.await(func(s *Server) error { return c.knowsAll(s, len(all)) })
	if err != nil {
		return err
	}
	for i, rs := range c.Replicas {
		for _, r := range rs {
			if err := call(r, "CLUSTER", "REPLICATE", c.ids[c.Primaries[i]]); err != nil {
				return err
			}
		}
	}
	return c.await(func(s *Server) error {
		if err := stateOK(s); err != nil {
			return err
		}
		for i, p := range c.Primaries {
			if err := c.owns(s, p, i); err != nil {
				return err
			}
		}
		return replicaUp(s, c.Primaries)
	})
}

// await polls cond on every server of the Cluster until all pass, or fails
// after clusterTimeout with the last error and the view of the Cluster
// (CLUSTER NODES) of the server that failed it, so that a Cluster that
// never agrees can be told from a slow one.
func (c *Cluster) await(cond func(*Server) error) error {
	deadline := time.Now().Add(clusterTimeout)
	for {
		var err error
		var failing *Server
		for _, s := range c.Servers() {
			if err = cond(s); err != nil {
				failing = s
				break
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			view, verr := do(failing, "CLUSTER", "NODES")
			if verr != nil {
				return fmt.Errorf("after %v: %w (and its view: %v)", clusterTimeout, err, verr)
			}
			return fmt.Errorf("after %v: %w; its view of the Cluster:\n%v", clusterTimeout, err, view)
		}
		time.Sleep(10 * time.Millisecond) // the Cluster bus gossips; nothing signals agreement
	}
}

// knowsAll reports an error until s lists n nodes, every one connected.
func (c *Cluster) knowsAll(s *Server, n int) error {
	v, err := do(s, "CLUSTER", "NODES")
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(v.(string)), "\n")
	if len(lines) != n {
		return fmt.Errorf("%s knows %d nodes of %d", s.Addr(), len(lines), n)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) < 8 || strings.Contains(f[2], "handshake") || f[7] != "connected" {
			return fmt.Errorf("%s: node not joined yet: %s", s.Addr(), l)
		}
	}
	return nil
}

// owns reports an error until s sees primary as an online primary serving
// slots (at first the i-th range; after [Cluster.MoveSlot], whichever its
// shard serves now).
func (c *Cluster) owns(s, primary *Server, i int) error {
	ranges, health, err := c.primaryView(s, primary)
	if err != nil {
		return err
	}
	if len(ranges) == 0 || health != "online" {
		return fmt.Errorf("%s does not yet see %s (shard %d) serving slots", s.Addr(), primary.Addr(), i)
	}
	return nil
}

// serves reports an error until s sees primary serve slot sl.
func (c *Cluster) serves(s, primary *Server, sl int) error {
	ranges, _, err := c.primaryView(s, primary)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, _ := ranges[i].(int64)
		hi, _ := ranges[i+1].(int64)
		if int64(sl) >= lo && int64(sl) <= hi {
			return nil
		}
	}
	return fmt.Errorf("%s does not yet see %s serve slot %d", s.Addr(), primary.Addr(), sl)
}

// primaryView returns, as s sees it (CLUSTER SHARDS), the slot ranges
// (start, end, start, end...) of the shard whose primary is primary, and
// primary's health; no ranges when s does not see it as a primary.
func (c *Cluster) primaryView(s, primary *Server) (ranges []any, health any, err error) {
	v, err := do(s, "CLUSTER", "SHARDS")
	if err != nil {
		return nil, nil, err
	}
	for _, shard := range v.([]any) {
		info := pairs(shard)
		for _, nd := range info["nodes"].([]any) {
			if n := pairs(nd); n["id"] == c.ids[primary] && n["role"] == "master" {
				ranges, _ = info["slots"].([]any)
				return ranges, n["health"], nil
			}
		}
	}
	return nil, nil, nil
}

// pairs reads a RESP2 flat list of field/value pairs.
func pairs(v any) map[string]any {
	m := map[string]any{}
	list, _ := v.([]any)
	for i := 0; i+1 < len(list); i += 2 {
		m[fmt.Sprint(list[i])] = list[i+1]
	}
	return m
}

// stateOK reports an error until s says cluster_state:ok.
func stateOK(s *Server) error {
	v, err := do(s, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	if !strings.Contains(v.(string), "cluster_state:ok") {
		return fmt.Errorf("%s: cluster_state not ok", s.Addr())
	}
	return nil
}

// replicaUp reports an error until s, if a replica, has its link up.
func replicaUp(s *Server, primaries []*Server) error {
	for _, p := range primaries {
		if p == s {
			return nil
		}
	}
	v, err := do(s, "INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(v.(string), "master_link_status:up") {
		return fmt.Errorf("%s: replication link not up", s.Addr())
	}
	return nil
}

// do runs one command on s over a short-lived connection and returns its
// reply, or its error (redis.Nil included).
func do(s *Server, args ...any) (any, error) {
	cl := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.cfg.Password, DialTimeout: doTimeout,
		ReadTimeout: doTimeout, WriteTimeout: doTimeout, MaxRetries: -1, PoolSize: 1, Protocol: 2})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	v, err := cl.Do(ctx, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("%v on %s: %w", args, s.Addr(), err)
	}
	return v, nil
}

// call is do for a command whose reply does not matter.
func call(s *Server, args ...any) error {
	_, err := do(s, args...)
	return err
}
