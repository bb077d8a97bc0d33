package node

import (
	"context"
	"errors"
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

// PeekOf reads a Call's answer to PeekScript.
func PeekOf(r Result) (Peek, error) { return ParsePeek(r.Reply) }
