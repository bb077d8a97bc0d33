package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// ErrTimeout is the Err of a Call the node did not answer in time.
var ErrTimeout = errors.New("node: no answer within the timeout")

// ErrNotSent is the Err, joined with ctx's, of a Call whose ctx had ended
// before the call: nothing was queued, the node was not asked, so it did not
// fail. (A command withdrawn while it waited behind the node's unanswered
// ones is ctx's error alone: the node was slow.)
var ErrNotSent = errors.New("nothing sent")

// Call sends script, with keys and args, to n behind the commands sent
// before it, and waits for the answer at most timeout after the command
// left (while it waits to leave, after the call; another timeout while this
// process is slow to run its goroutines, as a round gives, at most
// timing.Excuses): then Err is
// ErrTimeout and the command is left to run. If ctx ends first, Err is ctx's error
// and the command is withdrawn unless it has left; if ctx had ended before
// the call, nothing is queued and Err also matches ErrNotSent. For the
// operator's calls, not the lock path.
func (n *Node) Call(ctx context.Context, timeout time.Duration, script *Script, keys []string, args []any) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: fmt.Errorf("%w: %w", ErrNotSent, err)}
	}
	w := &waiter{sent: make(chan struct{}), done: make(chan Result, 1)}
	c := &Cmd{Script: script, Keys: keys, Args: args, To: w}
	n.Send(c)
	t := n.clock.NewTimer(timeout)
	defer func() { t.Stop() }()
	sent, excuses := w.sent, 0
	for {
		select {
		case r := <-w.done:
			return r
		case <-sent:
			t.Stop()
			t, sent = n.clock.NewTimer(timeout), nil
		case <-t.C():
			if excuses < timing.Excuses(timeout) && n.clock == clock.Real() && timing.WaitedToRun(time.Now().Add(-timeout), timeout/4) {
				t, excuses = n.clock.NewTimer(timeout), excuses+1 // this process is slow: its command unsent, or the answer unread
				continue
			}
			return Result{Err: ErrTimeout}
		case <-ctx.Done():
			c.Cancel()
			return Result{Err: ctx.Err()}
		}
	}
}

// waiter is the Receiver of a Call.
type waiter struct {
	sent chan struct{} // closed when the command leaves
	done chan Result
}

func (w *waiter) Sent(int, time.Time)     { close(w.sent) }
func (w *waiter) Receive(_ int, r Result) { w.done <- r }

// Read is Call for a command that only reads: to a node that has not
// answered for longer than timeout (Stalled) it is not sent, and fails at
// once with ErrTimeout, so a read waits for a hung node at most timeout
// (unless ctx has ended: then it is Call's ErrNotSent).
func (n *Node) Read(ctx context.Context, timeout time.Duration, script *Script, keys []string, args []any) Result {
	if waited, stalled := n.Stalled(timeout, true); stalled && ctx.Err() == nil {
		return Result{Err: fmt.Errorf("%w: none for %v; this command was not sent", ErrTimeout, waited.Round(time.Millisecond))}
	}
	return n.Call(ctx, timeout, script, keys, args)
}

// Each runs call on each of nodes that want selects (nil: every one), in
// parallel: values[i] and errs[i] are node i's answer and failure (as fail
// makes it of the node's address and error); both zero on a node not
// selected or not yet answered. enough, unless nil, is asked after each answer whether the
// answers in (done[i]: node i's) settle the outcome: then Each returns, and
// the calls still out see their ctx end (a command not yet sent is
// withdrawn, one sent is left to run) and finish in the background.
func Each[T any](ctx context.Context, nodes []*Node, want func(i int) bool, call func(context.Context, *Node) (T, error),
	fail func(addr string, err error) error, enough func(values []T, errs []error, done []bool) bool) (values []T, errs []error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		i   int
		v   T
		err error
	}
	answers, out := make(chan answer, len(nodes)), 0 // buffered: no sender blocks
	for i, n := range nodes {
		if want == nil || want(i) {
			out++
			go func() {
				v, err := call(ctx, n)
				answers <- answer{i, v, err}
			}()
		}
	}
	values, errs, done := make([]T, len(nodes)), make([]error, len(nodes)), make([]bool, len(nodes))
	for ; out > 0; out-- {
		a := <-answers
		if values[a.i], done[a.i] = a.v, true; a.err != nil {
			errs[a.i] = fail(nodes[a.i].addr, a.err)
		}
		if enough != nil && enough(values, errs, done) {
			break
		}
	}
	return values, errs
}

// Parse returns r's failure, or its reply as parse reads it.
func Parse[T any](r Result, parse func(any) (T, error)) (T, error) {
	if r.Err != nil {
		var zero T
		return zero, r.Err
	}
	return parse(r.Reply)
}
