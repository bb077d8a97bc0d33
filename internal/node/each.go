package node

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrTimeout is the Err of a Call the node did not answer in time.
var ErrTimeout = errors.New("node: no answer within the timeout")

// Call sends script, with keys and args, to n behind the commands sent
// before it, and waits for the answer at most timeout after the command
// left (while it waits to leave, after the call): then Err is ErrTimeout
// and the command is left to run. If ctx ends first, Err is ctx's error
// and the command is withdrawn unless it has left. For the operator's
// calls, not the lock path.
func (n *Node) Call(ctx context.Context, timeout time.Duration, script *Script, keys []string, args []any) Result {
	w := &waiter{sent: make(chan struct{}), done: make(chan Result, 1)}
	c := &Cmd{Script: script, Keys: keys, Args: args, To: w}
	n.Send(c)
	t := n.clock.NewTimer(timeout)
	defer func() { t.Stop() }()
	sent := w.sent
	for {
		select {
		case r := <-w.done:
			return r
		case <-sent:
			t.Stop()
			t, sent = n.clock.NewTimer(timeout), nil
		case <-t.C():
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

// Each makes the Call on each of nodes that want selects (nil: every one),
// in parallel, and reads each answer with parse: values[i] or errs[i] is
// node i's, a failure (also a reply parse refuses; ErrTimeout) as fail makes
// it of the node's address and error; both zero on a node not selected.
func Each[T any](ctx context.Context, nodes []*Node, want func(i int) bool, timeout time.Duration, script *Script, keys []string, args []any,
	parse func(Result) (T, error), fail func(addr string, err error) error) (values []T, errs []error) {
	values, errs = make([]T, len(nodes)), make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if want == nil || want(i) {
			wg.Go(func() {
				r := n.Call(ctx, timeout, script, keys, args)
				if err := r.Err; err != nil {
					errs[i] = fail(n.addr, err)
				} else if values[i], err = parse(r); err != nil {
					errs[i] = fail(n.addr, err)
				}
			})
		}
	}
	wg.Wait()
	return values, errs
}

// PeekOf reads a Call's answer to PeekScript.
func PeekOf(r Result) (Peek, error) { return ParsePeek(r.Reply) }
