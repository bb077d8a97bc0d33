package redlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// inspectCluster checks every primary of a Cluster node as inspect checks
// one server, naming the shard in each finding, and adds what the Cluster
// itself reports (cluster_state). The node's report is the worst of its
// shards': reachable and checked only if all are, the slowest round trip,
// the largest clock offset, the oldest version. It returns once ctx ends,
// unchecked, with the findings of the shards that answered and one for each
// primary that had not (a hung one keeps a request waiting for the client's
// read timeout, past ctx).
func (r *Redlock) inspectCluster(ctx context.Context, cc *redis.ClusterClient, addr string) inspection {
	in := inspection{NodeReport: NodeReport{Node: addr}}
	var mu sync.Mutex
	var ranges map[string][]string // primary's address -> its slot ranges; nil until known
	var shards []inspection
	visited := map[string]bool{}
	done := make(chan error, 1)
	go func() {
		//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; the library supports 5.0 and later.
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			done <- err
			return
		}
		mu.Lock()
		ranges = map[string][]string{}
		for _, s := range slots {
			if len(s.Nodes) > 0 {
				ranges[s.Nodes[0].Addr] = append(ranges[s.Nodes[0].Addr], fmt.Sprintf("%d-%d", s.Start, s.End))
			}
		}
		mu.Unlock()
		done <- cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			a := c.Options().Addr
			mu.Lock()
			shard := fmt.Sprintf("%s (slots %s)", a, strings.Join(ranges[a], ","))
			mu.Unlock()
			sub := r.inspect(ctx, c, addr, shard)
			if sub.Reachable && ctx.Err() == nil {
				judgeClusterState(ctx, c, &sub)
			}
			mu.Lock()
			defer mu.Unlock()
			visited[a] = true
			shards = append(shards, sub)
			return nil
		})
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case ranges == nil && ctx.Err() != nil:
		return in
	case ranges == nil:
		in.Checked = true
		if refusal := slotsRefused(ctx, cc); refusal != "" {
			in.add(Unfit, "acl", "", "refused CLUSTER SLOTS (%s), which a Cluster client needs to find the primaries: fix the credentials, or add +cluster|slots to the user's ACL rules (docs/operations.md)", refusal)
			return in
		}
		in.add(Unfit, "", "", "no primary answered CLUSTER SLOTS (%v): it counts as a failed node in every round", err)
		return in
	}
	why := "the client's slot map named other primaries: its seeds may reach two Clusters"
	switch {
	case ctx.Err() != nil:
		why = "it did not answer before the context ended"
	case err != nil:
		why = err.Error()
	}
	missing := false
	for a := range ranges {
		if !visited[a] {
			missing = true
			in.add(Unfit, "", "", "primary %s (slots %s) was not checked (%s): the names of its slots fail on this node", a, strings.Join(ranges[a], ","), why)
		}
	}
	if ctx.Err() == nil {
		judgeSeeds(ctx, cc.Options(), &in)
	}
	slices.SortFunc(shards, func(a, b inspection) int { return cmp.Compare(a.shard, b.shard) })
	in.Checked, in.Reachable = ctx.Err() == nil, len(shards) > 0 && (!missing || ctx.Err() == nil)
	for _, sub := range shards {
		in.Checked = in.Checked && sub.Checked
		in.Reachable = in.Reachable && sub.Reachable
		in.RTT = max(in.RTT, sub.RTT)
		if sub.ClockOffset.Abs() > in.ClockOffset.Abs() {
			in.ClockOffset = sub.ClockOffset
		}
		if in.Version == "" || olderVersion(sub.Version, in.Version) {
			in.Version = sub.Version
		}
		in.findings = append(in.findings, sub.findings...)
		in.runIDs = append(in.runIDs, sub.runIDs...)
	}
	return in
}

// slotsRefused asks cc's seeds CLUSTER SLOTS itself, as cc's user, and
// returns the first refusal of the user's credentials or ACL permissions
// (node.Refuses): cc may report that only as "cluster has no nodes".
func slotsRefused(ctx context.Context, cc *redis.ClusterClient) string {
	o := cc.Options()
	for _, addr := range o.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, Dialer: o.Dialer, Protocol: o.Protocol, Username: o.Username, Password: o.Password,
			CredentialsProvider: o.CredentialsProvider, TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout,
			WriteTimeout: o.WriteTimeout, MaxRetries: -1, DialerRetries: 1})
		//lint:ignore SA1019 as inspectCluster's
		err := c.ClusterSlots(ctx).Err()
		_ = c.Close()
		if node.Refuses(err) {
			return err.Error()
		}
	}
	return ""
}

// judgeSeeds finds a Cluster client whose seeds reach two Clusters: two
// seeds' member lists (CLUSTER NODES) share no node ID. Such a node is
// whichever Cluster its slot map was last loaded from, and may be another
// node's Cluster counted twice.
func judgeSeeds(ctx context.Context, o *redis.ClusterOptions, in *inspection) {
	var first map[string]bool
	var firstAddr string
	for _, addr := range o.Addrs {
		c := seedClient(o, addr)
		text, err := c.ClusterNodes(ctx).Result()
		_ = c.Close()
		switch {
		case err != nil:
		case first == nil:
			first, firstAddr = map[string]bool{}, addr
			for _, id := range memberIDs(text) {
				first[id] = true
			}
		case !slices.ContainsFunc(memberIDs(text), func(id string) bool { return first[id] }):
			in.add(Unfit, "seeds", addr, "seeds %s and %s are members of different Clusters: the node is whichever its slot map came from last, and may count another node's Cluster twice; list the servers of one Cluster", firstAddr, addr)
			return
		}
	}
}

// judgeClusterState finds a shard whose Cluster is down: it answers
// CLUSTERDOWN to every lock round.
func judgeClusterState(ctx context.Context, c *redis.Client, in *inspection) {
	text, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return
	}
	if state := parseInfo(text)["cluster_state"]; state != "ok" {
		in.add(Unfit, "cluster_state", state, "the Cluster is down as this primary sees it: it answers CLUSTERDOWN, and the node fails every round for the names of its slots")
	}
}

// olderVersion reports whether version a is older than b.
func olderVersion(a, b string) bool {
	amaj, amin, aok := parseVersion(a)
	bmaj, bmin, bok := parseVersion(b)
	return aok && bok && (amaj < bmaj || amaj == bmaj && amin < bmin)
}
