package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sameServer tells, for the clients NewFromURLs makes, when two of its URLs
// reach one redis-server (localhost and 127.0.0.1, a DNS alias): that server
// would cast two votes, and a majority of the URLs would no longer be a
// majority of servers. Every new connection of node i asks INFO server for
// the server's run_id (skipped where INFO is refused); once two nodes report
// the same one, both are refused from then on, each command failing with an
// error matching mutex.ErrInvalid that names both. Safe for concurrent use.
type sameServer struct {
	names []string

	mu    sync.Mutex
	first map[string]int // run_id → the first node that reported it
	dup   []error        // per node: why it is refused; nil while it is not
}

func newSameServer(names []string) *sameServer {
	return &sameServer{names: names, first: map[string]int{}, dup: make([]error, len(names))}
}

// watch makes client i check each new connection and refuse commands once
// its server is known under another node's name too.
func (s *sameServer) watch(i int, o *redis.Options) {
	o.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		info, err := cn.Info(ctx, "server").Result()
		var reply redis.Error
		switch {
		case errors.As(err, &reply):
			return nil // INFO refused (ACL): no check
		case err != nil:
			return err
		}
		for line := range strings.Lines(info) {
			if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && id != "" {
				return s.claim(i, id)
			}
		}
		return nil
	}
}

// hook returns the go-redis hook that refuses node i's commands once it is
// known to share its server with another node.
func (s *sameServer) hook(i int) redis.Hook { return refuseHook{s: s, i: i} }

// claim records that node i's server has run_id id, and returns the error
// that refuses it if another node reported the same server.
func (s *sameServer) claim(i int, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, seen := s.first[id]
	switch {
	case !seen:
		s.first[id] = i
		return s.dup[i]
	case j == i:
		return s.dup[i]
	}
	a, b := min(i, j), max(i, j)
	err := invalid("redlock: node %d (%s) and node %d (%s) are the same redis-server (run_id %s): each node must be a separate server, or it votes twice; both are refused until the URLs are fixed", a, s.names[a], b, s.names[b], id)
	s.dup[i], s.dup[j] = err, err
	return err
}

// err returns why node i is refused, or nil.
func (s *sameServer) err(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dup[i]
}

// firstErr returns the first refusal found, or nil.
func (s *sameServer) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range s.dup {
		if err != nil {
			return err
		}
	}
	return nil
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
