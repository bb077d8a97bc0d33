package node

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	// Sent is when the command left for the node, on the node's clock.
	Sent time.Time
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
	// Line, if set, is the whole command as EVALSHA (see EvalSHALine),
	// likewise shared: sent as it is when the node has the script.
	Line []any
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

// Forget queues script on n, with keys (boxed as keyArgs) and args, its
// outcome unread; unless, if not nil, withdraws it when true at the moment
// it would be sent.
func (n *Node) Forget(script *Script, keys []string, keyArgs, args []any, unless func() bool) {
	n.Send(&Cmd{Script: script, Keys: keys, KeyArgs: keyArgs, Args: args, To: discard{}, Unless: unless})
}

type discard struct{}

func (discard) Sent(int, time.Time) {}
func (discard) Receive(int, Result) {}

// Later sends a script call, its outcome unread, once the node next answers a round trip, the one in flight
// or a later one: a command abandoned by the client on a dropped connection
// may still run on the node after the commands sent since on a new one, and
// not after that answer. At most maxLater wait; the oldest are dropped.
// While any wait, the node is probed (probe) until it answers, so they leave
// even when this process has nothing more to send it; Close drops them.
func (n *Node) Later(script *Script, keys []string, keyArgs, args []any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.later) == maxLater {
		n.later = n.later[1:]
	}
	n.later = append(n.later, &Cmd{Script: script, Keys: keys, KeyArgs: keyArgs, Args: args, To: discard{}})
	n.hasLater.Store(true)
	if !n.probing && !n.closed {
		n.probing, n.probes = true, 0
		time.AfterFunc(probeFirst, n.probe)
	}
}

// A node holding commands for Later is probed probeFirst after the first,
// then at doubling intervals up to probeMax, at most maxProbes times (ten
// minutes: a key with a longer TTL is then left to expire, as before).
const (
	maxLater   = 1024
	probeFirst = 100 * time.Millisecond
	probeMax   = time.Second
	maxProbes  = 600
)

// probe sends the node a PING of its own, unless a round trip is already on
// its way (whose answer sends what waits): if the node answers, what waits
// for Later is sent; if not, the next probe is due.
func (n *Node) probe() {
	n.mu.Lock()
	idle := !n.sending && !n.closed
	n.mu.Unlock()
	if ctx := context.Background(); idle && n.hasLater.Load() {
		if err := n.client.Process(ctx, redis.NewStatusCmd(ctx, "ping")); err == nil || isReply(err) {
			n.sendLater()
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.probes++; n.closed || !n.hasLater.Load() || n.probes == maxProbes {
		n.probing = false
		return
	}
	time.AfterFunc(min(probeFirst<<min(n.probes, 8), probeMax), n.probe)
}

// sendLater sends what waits for Later, the node having just answered.
func (n *Node) sendLater() {
	n.mu.Lock()
	later := n.later
	n.later = nil
	n.hasLater.Store(false)
	n.mu.Unlock()
	for _, c := range later {
		n.Send(c)
	}
}

// Close drops the commands waiting for Later, ends the probes, and tells o
// that the node left the quarantine it was told of, if any, then nothing
// more: the node set is closed, and its clients are about to be.
func (n *Node) Close(o QuarantineObserver) {
	n.endReport(o, time.Time{}, true)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed, n.later = true, nil
	n.hasLater.Store(false)
}

// Flush blocks until every command sent to the node before it has completed.
func (n *Node) Flush() { <-n.Drained() }

// Drained returns a channel closed once every command sent to the node
// before the call has completed; it does not block.
func (n *Node) Drained() <-chan struct{} {
	done := make(barrier)
	n.Send(&Cmd{To: done})
	return done
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
			n.sending = false
			if !n.silent {
				n.busySince = time.Time{}
			}
			n.mu.Unlock()
			return
		case k < len(batch):
			batch, n.queue, whole = batch[:k], batch[k:], false
		default:
			n.queue, n.spare = n.spare, nil
		}
		if n.busySince.IsZero() || !n.silent { // a node that did not answer the last one stays silent
			n.busySince = time.Now()
		}
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
	n.silent = timedOut(results)
	if err := results[0].Err; n.hasLater.Load() && (err == nil || isReply(err)) {
		n.sendLater()
	}
	for i, c := range live {
		results[i].Sent = at
		c.To.Receive(c.Index, results[i])
	}
	clear(results) // the replies are the receivers' now
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

// timedOut reports whether every command of a round trip timed out: the
// node did not answer.
func timedOut(results []Result) bool {
	for _, r := range results {
		if r.Err == nil || !isTimeout(r.Err) { // an answer allocates nothing here
			return false
		}
	}
	return len(results) > 0
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
