package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
)

// Client is what a node needs of its go-redis client: scripts, and pipelines
// to send many of them in one round trip. Every go-redis client has both.
type Client interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

// Node is one independent Redis primary of a node set. It is safe for
// concurrent use.
type Node struct {
	client Client
	addr   string
	clock  clock.Clock
	// Multi-key scripts are sent only to clients that reach one server:
	// a Cluster or Ring client would split their keys across slots.
	multiKey bool
	health   health

	mu        sync.Mutex
	queue     []*Cmd    // waiting to be sent, in order
	spare     []*Cmd    // a drained queue's storage, for reuse
	sending   bool      // a sender goroutine runs
	busySince time.Time // when the batch in flight was sent, on real time; zero if none
	loaded    []*Script // scripts this node has cached, as far as we know

	latency atomic.Int64          // smoothed round trip of a batch, in ns
	refusal atomic.Pointer[error] // the node's last refusal of an unauthenticated command, until it next answers
}

// New returns the node reached through client, named addr in errors. The
// departure times given to receivers are read on c; latency and stalls are
// measured on real time, since they are the network's.
func New(client Client, addr string, c clock.Clock) *Node {
	n := &Node{client: client, addr: addr, clock: c, multiKey: true}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		n.multiKey = false
	}
	return n
}

// Addr returns the address the node is reported under.
func (n *Node) Addr() string { return n.addr }

// SetAddr changes the name the node is reported under; only before use.
func (n *Node) SetAddr(addr string) { n.addr = addr }

// Client returns the node's client.
func (n *Node) Client() Client { return n.client }

// MultiKey reports whether scripts over several unrelated keys can be sent
// to the node in one call.
func (n *Node) MultiKey() bool { return n.multiKey }

// Latency returns the smoothed round trip of the node's recent batches, or 0
// before the first.
func (n *Node) Latency() time.Duration { return time.Duration(n.latency.Load()) }

// Stalled returns how long the batch in flight has gone unanswered, if that
// is more than d: the node (or the way to it) is not answering, and commands
// that may be skipped should not queue behind it.
func (n *Node) Stalled(d time.Duration) (time.Duration, bool) {
	n.mu.Lock()
	since := n.busySince
	n.mu.Unlock()
	if since.IsZero() {
		return 0, false
	}
	waited := time.Since(since)
	return waited, waited > d
}

// Receiver takes the outcome of commands. Its methods are called on the
// node's sender goroutine: they must not block.
type Receiver interface {
	// Sent reports that command i left for the node at at.
	Sent(i int, at time.Time)
	// Receive delivers command i's result.
	Receive(i int, r Result)
}

// Result is a command's outcome.
type Result struct {
	Reply any
	Err   error
	// NoScript reports that the node answered NOSCRIPT to a script it had
	// cached before: its script cache was emptied (a restart, SCRIPT FLUSH).
	// The command was then sent again in full, and Reply is that answer.
	NoScript bool
}

// Cmd is one script call to send to a node: Script with Keys and Args,
// whose outcome goes to To with Index. A Cmd is sent once.
type Cmd struct {
	Script *Script
	Keys   []string
	Args   []any
	To     Receiver
	Index  int
	// KeyArgs, if set, is Keys boxed as command arguments, shared by the
	// commands of one fan-out so that each boxes no key of its own.
	KeyArgs []any
	// Unless, if set, is asked just before the command is sent: true
	// withdraws it (as Cancel would). A release queued behind an acquire
	// uses it to skip itself when that acquire was refused.
	Unless func() bool
	state  atomic.Uint32
}

const (
	queued uint32 = iota
	sent
	cancelled
)

// Cancel withdraws a command that has not been sent yet and reports whether
// it did; its Receiver then hears nothing of it. A command already sent
// cannot be withdrawn.
func (c *Cmd) Cancel() bool { return c.state.CompareAndSwap(queued, cancelled) }

// Flush blocks until every command sent to the node before it has completed.
func (n *Node) Flush() {
	done := make(barrier)
	n.Send(&Cmd{To: done})
	<-done
}

type barrier chan struct{}

func (b barrier) Sent(int, time.Time) {}
func (b barrier) Receive(int, Result) { close(b) }

// maxBatch bounds the commands sent to a node in one round trip, and
// maxBatchArgs their arguments: a round trip carrying thousands of lease
// renewals would take the node long enough to run that every command in it
// (and any acquire behind it) could miss its per-node timeout, which runs
// from the moment the round trip leaves. Commands beyond either bound go in
// the next round trip, with their own departure.
const (
	maxBatch     = 512
	maxBatchArgs = 1024
)

// cut returns how many of the queued commands go in the next round trip: at
// least one, within maxBatch and maxBatchArgs.
func cut(queue []*Cmd) int {
	args := 0
	for i, c := range queue {
		args += 3 + len(c.Keys) + len(c.Args)
		if i == maxBatch || (i > 0 && args > maxBatchArgs) {
			return i
		}
	}
	return len(queue)
}

// Send queues c behind every command sent to the node before it: commands
// reach the node, and run there, in the order of Send, whoever sent them.
// It never blocks; the node's sender goroutine, running while there is
// anything to send, delivers the outcome to c.To.
func (n *Node) Send(c *Cmd) {
	n.mu.Lock()
	n.queue = append(n.queue, c)
	start := !n.sending
	n.sending = true
	n.mu.Unlock()
	if start {
		go n.send()
	}
}

// send is the sender goroutine: it sends what is queued, many commands to a
// round trip, one batch at a time, and returns when nothing is left.
func (n *Node) send() {
	for {
		n.mu.Lock()
		batch, whole := n.queue, true
		switch k := cut(batch); {
		case len(batch) == 0:
			n.sending, n.busySince = false, time.Time{}
			n.mu.Unlock()
			return
		case k < len(batch):
			batch, n.queue, whole = batch[:k], batch[k:], false
		default:
			n.queue, n.spare = n.spare, nil
		}
		n.busySince = time.Now()
		n.mu.Unlock()
		n.exec(batch)
		if whole {
			clear(batch)
			n.mu.Lock()
			if n.spare == nil && cap(batch) <= 2*maxBatch {
				n.spare = batch[:0]
			}
			n.mu.Unlock()
		}
	}
}

// exec sends one batch and delivers its results. A barrier in the batch
// is delivered once everything before it is.
func (n *Node) exec(batch []*Cmd) {
	live := batch[:0:0]
	for _, c := range batch {
		switch {
		case c.Script == nil:
			n.deliver(live)
			live = live[:0]
			c.To.Receive(c.Index, Result{})
		case c.Unless != nil && c.Unless():
			c.state.CompareAndSwap(queued, cancelled)
		case c.state.CompareAndSwap(queued, sent):
			live = append(live, c)
		}
	}
	n.deliver(live)
}

// deliver sends live commands in one round trip and delivers their results.
func (n *Node) deliver(live []*Cmd) {
	if len(live) == 0 {
		return
	}
	at, start := n.clock.Now(), time.Now()
	for _, c := range live {
		c.To.Sent(c.Index, at)
	}
	results := n.run(live)
	n.observe(time.Since(start))
	for i, c := range live {
		c.To.Receive(c.Index, results[i])
	}
}

// observe folds one batch's round trip into the node's latency.
func (n *Node) observe(rtt time.Duration) {
	old := n.latency.Load()
	if old == 0 {
		n.latency.Store(int64(rtt))
		return
	}
	n.latency.Store(old + (int64(rtt)-old)/8)
}

// run sends cmds in one round trip and returns their results in order.
func (n *Node) run(cmds []*Cmd) []Result {
	ctx := context.Background()
	results := make([]Result, len(cmds))
	if len(cmds) == 1 && n.isLoaded(cmds[0].Script) {
		c := cmds[0]
		r := evalSHACmd(ctx, c)
		_ = n.client.Process(ctx, r)
		if !isNoScript(r.Err()) {
			results[0] = Result{Reply: r.Val(), Err: n.explain(r.Err())}
			return results
		}
		n.forget()
		results[0].NoScript = true
		r = evalCmd(ctx, c)
		_ = n.client.Process(ctx, r)
		n.markLoaded(c.Script, r.Err())
		results[0].Reply, results[0].Err = r.Val(), n.explain(r.Err())
		return results
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

// explain names the likely cause of an error whose own text hides it.
// Redis refuses a long command from a connection that has not authenticated
// with a protocol error rather than NOAUTH, and then closes the connection:
// the commands behind it fail with EOF or a reset, which are explained by
// that refusal until the node next answers a command.
func (n *Node) explain(err error) error {
	switch {
	case unauthenticated(err):
		refusal := fmt.Errorf("NOAUTH Authentication required (the node refused the command of an unauthenticated connection: %w)", err)
		n.refusal.Store(&refusal)
		return refusal
	case err == nil || isReply(err):
		if n.refusal.Load() != nil {
			n.refusal.Store(nil)
		}
	default:
		if refused := n.refusal.Load(); refused != nil {
			return fmt.Errorf("%w (the node closed the connection after: %v)", err, *refused)
		}
	}
	return err
}

func unauthenticated(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unauthenticated")
}

// pipeline sends cmds in one pipeline: EVALSHA for the scripts the node has
// cached, EVAL for the others, preceded by SCRIPT LOAD where the digest is
// still unknown.
func (n *Node) pipeline(ctx context.Context, cmds []*Cmd) []*redis.Cmd {
	p := n.client.Pipeline()
	var loads []*Script
	var loadCmds []*redis.StringCmd
	for _, c := range cmds {
		if c.Script.digest() == "" && !containsScript(loads, c.Script) {
			loads = append(loads, c.Script)
			loadCmds = append(loadCmds, p.ScriptLoad(ctx, c.Script.src))
		}
	}
	out := make([]*redis.Cmd, len(cmds))
	var evaled []*Script
	for i, c := range cmds {
		loaded := n.isLoaded(c.Script)
		if loaded {
			out[i] = evalSHACmd(ctx, c)
		} else {
			out[i] = evalCmd(ctx, c)
		}
		_ = p.Process(ctx, out[i])
		if !loaded {
			if !containsScript(evaled, c.Script) {
				evaled = append(evaled, c.Script)
			}
		}
	}
	_, _ = p.Exec(ctx)
	for i, s := range loads {
		if sha, err := loadCmds[i].Result(); err == nil && sha != "" {
			s.learn(sha)
		}
	}
	for _, s := range evaled {
		for i, c := range cmds {
			if c.Script == s {
				n.markLoaded(s, out[i].Err())
				break
			}
		}
	}
	return out
}

// evalCmd returns c as EVAL, with the script's source.
func evalCmd(ctx context.Context, c *Cmd) *redis.Cmd {
	return scriptCmd(ctx, c, "eval", c.Script.srcArg)
}

// evalSHACmd returns c as EVALSHA, with the script's digest.
func evalSHACmd(ctx context.Context, c *Cmd) *redis.Cmd {
	return scriptCmd(ctx, c, "evalsha", c.Script.shaArg())
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
	cmd := redis.NewCmd(ctx, args...)
	if len(c.Keys) > 0 {
		cmd.SetFirstKeyPos(3) // Cluster and Ring clients route by the first key
	}
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

func (n *Node) isLoaded(s *Script) bool {
	if s.digest() == "" {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return containsScript(n.loaded, s)
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
	if !containsScript(n.loaded, s) {
		n.loaded = append(n.loaded, s)
	}
}

// forget records that the node's script cache was emptied.
func (n *Node) forget() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.loaded = n.loaded[:0]
}

func containsScript(list []*Script, s *Script) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// isReply reports whether err is an error reply from the server (it ran the
// command and refused it), rather than a failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}
