package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/quorumlocktest"
)

// TestLeaderStepsDownWhenItsLockIsLost runs one candidate (-candidate mode)
// on 5 in-process nodes (quorumlocktest) and restarts every node empty while
// it leads: it says "not leader any more" when its leadership's Done
// closes, then leads again on the empty nodes, and steps down (resigns) when
// its ctx ends.
func TestLeaderStepsDownWhenItsLockIsLost(t *testing.T) {
	nodes := quorumlocktest.Start(t, 5)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	done := make(chan error, 1)
	go func() {
		err := runCandidate(ctx, w, strings.Join(nodes.URLs(), ","), 1)
		_ = w.Close()
		done <- err
	}()
	next := func(want string) string {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case l := <-lines:
				t.Log(l)
				if strings.Contains(l, want) {
					return l
				}
			case <-timeout:
				t.Fatalf("no %q within 10s", want)
			}
		}
	}

	next(": leader")
	for i := range 5 { // a power cut: every node comes back empty
		nodes.Hang(i)
	}
	for i := range 5 {
		nodes.Restart(i)
	}
	next(": not leader any more")
	next(": leader")
	cancel()
	next("stepped down (resign: ok)")
	require.NoError(t, <-done)
	for range lines { // until the scanner ends
	}
}
