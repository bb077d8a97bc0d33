package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// runCandidate is one candidate as a process of its own (-candidate id), for
// an election among processes on real nodes: start it in several terminals
// with the same -nodes, kill the leader (kill -9 <pid>), and watch another
// take over within about one TTL. It prints one line per event, with the
// time in Unix milliseconds, until ctx ends (Ctrl-C, SIGTERM), when it steps
// down and unlocks if it leads.
func runCandidate(ctx context.Context, out io.Writer, urls string, id int) error {
	if urls == "" {
		return errors.New("-candidate needs -nodes: candidates in separate processes must share real Redis nodes, not embedded ones")
	}
	list, stop, err := demo.URLs(urls, 0)
	if err != nil {
		return err
	}
	defer stop()
	rs, err := demo.Open(ctx, list, redlock.WithKeyPrefix("leader-demo:"))
	if err != nil {
		return err
	}
	defer rs.Close()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%d candidate %d (pid %d): %s\n", time.Now().UnixMilli(), id, os.Getpid(), fmt.Sprintf(format, args...))
	}
	say("campaigning")
	for {
		m := rs.NewMutex(leaderLock,
			mutex.WithTTL(ttl),
			mutex.WithAutoExtend(),
			mutex.WithRetryDelay(5*time.Millisecond, 50*time.Millisecond))
		if err := m.LockContext(ctx); err != nil {
			if ctx.Err() != nil {
				say("stopped")
				return nil
			}
			say("no leader lock (%v); campaigning again", err)
			continue
		}
		say("leader")
		select {
		case <-m.Lost():
			say("not leader: %v", m.LostCause())
			_ = m.UnlockContext(context.WithoutCancel(ctx))
		case <-ctx.Done():
			err := m.UnlockContext(context.WithoutCancel(ctx))
			say("stepped down (unlock: %v)", errOrOK(err))
			return nil
		}
	}
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}
