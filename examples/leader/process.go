package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/redlock"
)

// open connects a process of its own to the real nodes at urls.
func open(ctx context.Context, urls, mode string) (*redlock.Redlock, func(), error) {
	if urls == "" {
		return nil, nil, errors.New(mode + " needs -nodes: processes must share real Redis nodes, not embedded ones")
	}
	list, stop, err := demo.URLs(urls, 0)
	if err != nil {
		return nil, nil, err
	}
	rs, err := demo.Open(ctx, list, redlock.WithKeyPrefix("leader-demo:"))
	if err != nil {
		stop()
		return nil, nil, err
	}
	return rs, func() { _ = rs.Close(); stop() }, nil
}

// runCandidate is one candidate as a process of its own (-candidate id), for
// an election among processes on real nodes: start it in several terminals
// with the same -nodes, kill the leader (kill -9 <pid>), and watch another
// take over within about one TTL. It prints one line per event, with the
// time in Unix milliseconds, until ctx ends (Ctrl-C, SIGTERM), when it
// resigns if it leads.
func runCandidate(ctx context.Context, out io.Writer, urls string, id int) error {
	rs, closeAll, err := open(ctx, urls, "-candidate")
	if err != nil {
		return err
	}
	defer closeAll()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%d candidate %d (pid %d): %s\n", time.Now().UnixMilli(), id, os.Getpid(), fmt.Sprintf(format, args...))
	}
	say("campaigning")
	e := newElection(rs)
	for {
		if err := e.Campaign(ctx, fmt.Sprintf("candidate %d (pid %d)", id, os.Getpid())); err != nil {
			if ctx.Err() != nil {
				say("stopped")
				return nil
			}
			say("not elected (%v); campaigning again", err)
			continue
		}
		say("leader")
		select {
		case <-e.Done():
			say("not leader any more")
		case <-ctx.Done():
			err := e.Resign(context.WithoutCancel(ctx))
			say("stepped down (resign: %v)", errOrOK(err))
			return nil
		}
	}
}

// runObserver is an observer as a process of its own (-observe): it never
// campaigns, and prints every change of leader until ctx ends.
func runObserver(ctx context.Context, out io.Writer, urls string) error {
	rs, closeAll, err := open(ctx, urls, "-observe")
	if err != nil {
		return err
	}
	defer closeAll()
	for l := range newElection(rs).Observe(ctx) {
		fmt.Fprintf(out, "%d observer (pid %d): %s\n", time.Now().UnixMilli(), os.Getpid(), describe(l))
	}
	return nil
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}
