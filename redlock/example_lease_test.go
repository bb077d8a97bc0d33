package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// ExampleRedlock_Do runs a job under a lock that is renewed for as long as the
// job runs and released when it returns.
func ExampleRedlock_Do() {
	clients, stop := embeddedNodes(3)
	defer stop()
	rs, err := redlock.New(clients)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	err = rs.Do(ctx, "nightly-report", func(ctx context.Context) error {
		// ctx is cancelled, with a cause matching mutex.ErrLost, if the lock
		// is lost: long work checks ctx.Done() and stops.
		fmt.Println("building the nightly report under the lock")
		return nil
	}, mutex.WithTTL(10*time.Second))
	switch {
	case errors.Is(err, mutex.ErrNotObtained):
		fmt.Println("someone else is building it")
	case errors.Is(err, mutex.ErrLost):
		fmt.Println("the lock was lost while the job ran: it may have overlapped another owner's")
	case err != nil:
		fmt.Println("job failed:", err)
	default:
		fmt.Println("done; the lock is released")
	}
	// Output:
	// building the nightly report under the lock
	// done; the lock is released
}

// ExampleWithRestartQuarantine keeps nodes that started less than 30 seconds
// ago out of every majority, since a node restarted without persistence may
// have forgotten locks it granted. The embedded nodes of this example have
// just started, so every vote is quarantined and the lock is not obtained;
// the nodes count again 30 seconds after they started.
func ExampleWithRestartQuarantine() {
	clients, stop := embeddedNodes(3)
	defer stop()
	// The quarantine learns when a node started from its uptime (INFO
	// server). The embedded miniredis nodes do not implement that section:
	// against them every attempt would fail with the node error "section
	// (server) is not supported" instead of ErrQuarantined. The hook below
	// stands in for it and answers as a redis-server started 5 seconds ago
	// does. Real nodes need nothing of the kind.
	for _, c := range clients {
		c.AddHook(startedSecondsAgo(5))
	}

	rs, err := redlock.New(clients, redlock.WithRestartQuarantine(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = rs.NewMutex("orders:42").TryLockContext(context.Background())
	fmt.Println("not obtained:", errors.Is(err, mutex.ErrNotObtained))
	fmt.Println("for want of nodes, not because of another owner:", errors.Is(err, mutex.ErrNodesUnavailable))
	var nodeErr *mutex.NodeError
	if errors.As(err, &nodeErr) {
		fmt.Println("a node is in quarantine:", errors.Is(nodeErr, mutex.ErrQuarantined))
	}
	// Output:
	// not obtained: true
	// for want of nodes, not because of another owner: true
	// a node is in quarantine: true
}

// startedSecondsAgo is a go-redis hook that answers INFO with the uptime of a
// server started that many seconds ago, for the embedded nodes of
// ExampleWithRestartQuarantine, which lack INFO server.
type startedSecondsAgo int

func (h startedSecondsAgo) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if info, ok := cmd.(*redis.StringCmd); ok && cmd.Name() == "info" {
			info.SetVal(fmt.Sprintf("# Server\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\nuptime_in_seconds:%d\r\n", h))
			return nil
		}
		return next(ctx, cmd)
	}
}

func (startedSecondsAgo) DialHook(next redis.DialHook) redis.DialHook { return next }

func (startedSecondsAgo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
