package node

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// run sends cmds in one round trip and returns their results in order, in
// a slice the node reuses: valid until the next run (the sender goroutine
// alone calls it).
func (n *Node) run(cmds []*Cmd) []Result {
	ctx := context.Background()
	if cap(n.results) < len(cmds) {
		n.results = make([]Result, len(cmds))
	}
	results := n.results[:len(cmds)]
	clear(results)
	if len(cmds) == 1 {
		if r, ok := n.runOne(ctx, cmds[0]); ok {
			results[0] = r
			return results
		}
	}
	rc := n.pipeline(ctx, cmds)
	first := -1
	for i, r := range rc {
		if isNoScript(r.Err()) {
			first = i
			break
		}
	}
	if first >= 0 {
		// The node lost its script cache. Every script is idempotent for
		// its token, so sending the rest of the batch again, in order and in
		// full, leaves the node as if the batch had run once.
		n.forget()
		for i := first; i < len(rc); i++ {
			results[i].NoScript = isNoScript(rc[i].Err())
		}
		copy(rc[first:], n.pipeline(ctx, cmds[first:]))
	}
	for i, r := range rc {
		results[i].Reply, results[i].Err = r.Val(), n.explain(r.Err())
	}
	return results
}

// runOne sends c alone as EVALSHA when the node has its script or may have
// it, then as EVAL if the node has not; ok is false when neither holds (the
// caller pipelines SCRIPT LOAD and EVAL).
func (n *Node) runOne(ctx context.Context, c *Cmd) (r Result, ok bool) {
	known := n.isLoaded(c.Script)
	if !known && !n.mayHave(c.Script) {
		return Result{}, false
	}
	cmd := evalSHACmd(ctx, c)
	_ = n.client.Process(ctx, cmd)
	if !isNoScript(cmd.Err()) {
		if !known {
			n.markLoaded(c.Script, cmd.Err())
		}
		return Result{Reply: cmd.Val(), Err: n.explain(cmd.Err())}, true
	}
	if known { // it had run here: the node lost its script cache
		n.forget()
		r.NoScript = true
	}
	cmd = evalCmd(ctx, c)
	_ = n.client.Process(ctx, cmd)
	n.markLoaded(c.Script, cmd.Err())
	r.Reply, r.Err = cmd.Val(), n.explain(cmd.Err())
	return r, true
}

// pipeline sends cmds in one pipeline: EVALSHA for the scripts the node has
// cached, EVAL for the others, preceded by SCRIPT LOAD where the digest is
// still unknown.
func (n *Node) pipeline(ctx context.Context, cmds []*Cmd) []*redis.Cmd {
	p := n.client.Pipeline()
	var loads []*Script
	var loadCmds []*redis.StringCmd
	for _, c := range cmds {
		if c.Script.digest() == "" && !slices.Contains(loads, c.Script) {
			loads = append(loads, c.Script)
			loadCmds = append(loadCmds, p.ScriptLoad(ctx, c.Script.src))
		}
	}
	out := make([]*redis.Cmd, len(cmds))
	var evaled []int // the first EVAL of each script
	for i, c := range cmds {
		loaded := n.isLoaded(c.Script)
		if loaded {
			out[i] = evalSHACmd(ctx, c)
		} else {
			out[i] = evalCmd(ctx, c)
		}
		_ = p.Process(ctx, out[i])
		if !loaded && !slices.ContainsFunc(evaled, func(j int) bool { return cmds[j].Script == c.Script }) {
			evaled = append(evaled, i)
		}
	}
	if _, err := p.Exec(ctx); err != nil {
		for _, c := range out { // never run: the round trip failed before (a connection that could not open)
			if c.Err() == nil && c.Val() == nil {
				c.SetErr(err)
			}
		}
	}
	for i, s := range loads {
		if sha, err := loadCmds[i].Result(); err == nil && sha != "" {
			s.learn(sha)
		}
	}
	for _, i := range evaled {
		n.markLoaded(cmds[i].Script, out[i].Err())
	}
	return out
}

// evalCmd returns c as EVAL, with the script's source.
func evalCmd(ctx context.Context, c *Cmd) *redis.Cmd {
	return scriptCmd(ctx, c, "eval", c.Script.srcArg)
}

// evalSHACmd returns c as EVALSHA, with the script's digest: on c.Line
// when it is set.
func evalSHACmd(ctx context.Context, c *Cmd) *redis.Cmd {
	if c.Line != nil {
		return keyed(redis.NewCmd(ctx, c.Line...), c)
	}
	return scriptCmd(ctx, c, "evalsha", c.Script.shaArg())
}

// AppendEvalSHALine appends to dst[:0] the arguments of an EVALSHA of
// script with the boxed keys and args, for Cmd.Line, and returns it; nil
// while the script's digest is unknown (FIPS 140 mode, before a node
// reported it). The commands of one fan-out share it: nothing writes to it
// until every one of them has been answered.
func AppendEvalSHALine(dst []any, script *Script, keys, args []any) []any {
	sha := script.shaArg()
	if sha == nil {
		return nil
	}
	line := append(dst[:0], "evalsha", sha, len(keys))
	return append(append(line, keys...), args...)
}

// scriptCmd returns c as the command verb (EVAL or EVALSHA) of script (its
// source or digest), as go-redis's Eval and EvalSha would build it, with one
// allocation for the arguments: the script's digest and source are boxed
// once, and Args are passed as the caller boxed them.
func scriptCmd(ctx context.Context, c *Cmd, verb, script any) *redis.Cmd {
	args := make([]any, 3, 3+len(c.Keys)+len(c.Args))
	args[0], args[1], args[2] = verb, script, len(c.Keys)
	if c.KeyArgs != nil {
		args = append(args, c.KeyArgs...)
	} else {
		for _, k := range c.Keys {
			args = append(args, k)
		}
	}
	args = append(args, c.Args...)
	return keyed(redis.NewCmd(ctx, args...), c)
}

// keyed returns cmd, a script call of c, routed by c's first key.
func keyed(cmd *redis.Cmd, c *Cmd) *redis.Cmd {
	if len(c.Keys) > 0 {
		routed(cmd)
	}
	return cmd
}

// routed gives cmd, a script call with keys, its keys' place (the first at
// 3, one after another), which Cluster and Ring clients route by. Without
// it, a new ClusterClient first asks its servers COMMAND, one at a time
// under a lock every such command waits on: a hung server would hold them
// all until its read timeout, whichever shard their keys live on.
func routed(cmd *redis.Cmd) *redis.Cmd {
	cmd.SetFirstKeyPos(3)
	cmd.SetStepCount(1)
	return cmd
}

// BoxKeys returns keys as command arguments, for Cmd.KeyArgs.
func BoxKeys(keys []string) []any {
	boxed := make([]any, len(keys))
	for i, k := range keys {
		boxed[i] = k
	}
	return boxed
}

// mayHave reports whether to send s as EVALSHA although it has not run on
// the node yet (for this Node): its digest is known, and the server likely
// caches it for another client (another process, an earlier Redlock), which
// saves sending its source. A NOSCRIPT answer then only means it does not,
// and EVAL follows. Never for a set's own copy (Script.Unique), whose first
// run must be an EVAL for a later NOSCRIPT to mean a restart.
func (n *Node) mayHave(s *Script) bool { return !s.unique && s.digest() != "" }

func (n *Node) isLoaded(s *Script) bool {
	if s.digest() == "" {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.loaded, s)
}

// markLoaded records that s is cached on the node after an EVAL of it that
// ended with err: any reply but a connection failure means the node ran (or
// at least compiled and cached) it.
func (n *Node) markLoaded(s *Script, err error) {
	if s.digest() == "" || (err != nil && !isReply(err)) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if !slices.Contains(n.loaded, s) {
		n.loaded = append(n.loaded, s)
	}
}

// forget records that the node's script cache was emptied.
func (n *Node) forget() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.loaded = n.loaded[:0]
}
