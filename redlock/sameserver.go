package redlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sameServer finds, for the clients NewFromURLs makes, a node set that counts
// one server or one Cluster twice (an alias, two seed lists of one Cluster, a
// Cluster and one of its servers), which would vote twice; a URL whose scheme
// does not match its server; a Cluster URL whose seeds reach two Clusters.
// Every new connection of node i asks INFO server (run_id, redis_mode) and,
// on a Cluster server, CLUSTER NODES (its Cluster's member IDs), each skipped
// where refused; a node found wrong is refused from then on, each command
// failing with an error matching mutex.ErrInvalid that names it (and the
// other node). Safe for concurrent use.
type sameServer struct {
	names   []string
	cluster []bool // per node: given as a Cluster URL

	mu      sync.Mutex
	first   map[string]int    // "run_id:<id>" or "member:<node ID>" → the first node that reached it
	members []map[string]bool // per node: the member IDs of the Cluster it reached
	reached []string          // per node: the first Cluster server it reached
	refused []error           // per node: why it is refused; nil while it is not
}

func newSameServer(names []string) *sameServer {
	return &sameServer{
		names: names, cluster: make([]bool, len(names)), first: map[string]int{},
		members: make([]map[string]bool, len(names)), reached: make([]string, len(names)),
		refused: make([]error, len(names)),
	}
}

// watch makes client i, whose server is at o.Addr, check each new
// connection and refuse commands once its node is known to be wrong.
func (s *sameServer) watch(i int, o *redis.Options) {
	addr := o.Addr
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		info, err := cn.Info(ctx, "server").Result()
		if err != nil {
			return ignoreRefusal(err) // INFO refused (ACL): no check
		}
		fields := parseInfo(info)
		var ids []string
		if fields["redis_mode"] == "cluster" {
			text, err := cn.ClusterNodes(ctx).Result()
			if err := ignoreRefusal(err); err != nil {
				return err
			}
			ids = memberIDs(text)
		}
		return s.claim(i, addr, fields["run_id"], fields["redis_mode"], ids)
	}
}

// ignoreRefusal returns nil for the server's refusal of a command, err
// otherwise.
func ignoreRefusal(err error) error {
	if isReplyErr(err) {
		return nil
	}
	return err
}

// memberIDs returns the node IDs CLUSTER NODES lists (one member per line,
// its ID first).
func memberIDs(text string) []string {
	var ids []string
	for line := range strings.Lines(text) {
		if id, _, _ := strings.Cut(strings.TrimSpace(line), " "); id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// watchCluster does watch for every server the Cluster client o reaches.
func (s *sameServer) watchCluster(i int, o *redis.ClusterOptions) {
	s.cluster[i] = true
	newClient := o.NewClient
	o.NewClient = func(opt *redis.Options) *redis.Client {
		s.watch(i, opt)
		if newClient != nil {
			return newClient(opt)
		}
		return redis.NewClient(opt)
	}
}

// hook returns the go-redis hook that refuses node i's commands once it is
// known to be wrong.
func (s *sameServer) hook(i int) redis.Hook { return refuseHook{s: s, i: i} }

// claim records that node i reached, at addr, a server with run_id id, in
// mode (redis_mode), a member of a Cluster of the member IDs members, and
// returns the error that refuses node i if that makes it wrong.
func (s *sameServer) claim(i int, addr, id, mode string, members []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refused[i]; err != nil {
		return err
	}
	var err error
	switch {
	case mode == "cluster" && !s.cluster[i]:
		err = invalid("redlock: node %d (%s) is a Redis Cluster server: use a redis+cluster:// URL (one per Cluster), or a standalone server; as one server it answers MOVED or CROSSSLOT for the names of other slots", i, s.names[i])
	case mode != "" && mode != "cluster" && s.cluster[i]:
		err = invalid("redlock: node %d (%s) reaches %s, a redis-server in %s mode, not a Redis Cluster server: use a redis:// URL for it", i, s.names[i], addr, mode)
	case len(members) > 0 && s.members[i] != nil && !slices.ContainsFunc(members, func(m string) bool { return s.members[i][m] }):
		err = invalid("redlock: node %d (%s) reaches two Redis Clusters (%s and %s are members of different ones): list the servers of one Cluster per URL", i, s.names[i], s.reached[i], addr)
	}
	if err != nil {
		s.refused[i] = err
		return err
	}
	if len(members) > 0 && s.members[i] == nil {
		s.members[i], s.reached[i] = map[string]bool{}, addr
	}
	for _, m := range members {
		s.members[i][m] = true
	}
	keys := make([]string, 0, 1+len(members))
	if id != "" {
		keys = append(keys, "run_id:"+id)
	}
	for _, m := range members {
		keys = append(keys, "member:"+m)
	}
	for _, k := range keys {
		j, seen := s.first[k]
		if !seen {
			s.first[k] = i
			continue
		}
		if j == i {
			continue
		}
		a, b := min(i, j), max(i, j)
		what := fmt.Sprintf("are the same redis-server (run_id %s): each node must be a separate server", id)
		if m, ok := strings.CutPrefix(k, "member:"); ok {
			what = fmt.Sprintf("reach the same Redis Cluster (member %s): a Cluster is one node, listed once in one redis+cluster:// URL", m)
		}
		err = invalid("redlock: node %d (%s) and node %d (%s) %s, or it votes twice; both are refused until the URLs are fixed", a, s.names[a], b, s.names[b], what)
		s.refused[i], s.refused[j] = err, err
		return err
	}
	return nil
}

// err returns why node i is refused, or nil.
func (s *sameServer) err(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[i]
}

// firstErr returns the first refusal found, or nil.
func (s *sameServer) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cmp.Or(s.refused...)
}

type refuseHook struct {
	s *sameServer
	i int
}

func (h refuseHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refuseHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.s.err(h.i); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h refuseHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.s.err(h.i); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}
