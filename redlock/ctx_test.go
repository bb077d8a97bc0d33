package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The set's calls return once their ctx ends whatever the nodes do: here a
// majority of five is paused (SIGSTOP), and the per-node timeout (1s)
// outlasts every ctx. Within 250ms of the ctx's end, generous for a busy
// machine and far from the per-node timeout the calls used to wait for. What
// must still reach the nodes goes on in the background: once the nodes are
// back and it is done, no lock key is left.
func TestAdminCallsAndDoReturnWhenCtxEndsWithAPausedMajority(t *testing.T) {
	const slack = 250 * time.Millisecond
	servers := redistest.Start(t, 5)
	paused := []*redistest.Server{servers[0], servers[1], servers[4]}
	pause := func(t *testing.T) (resume func()) {
		resume = func() {
			for _, s := range paused {
				s.Resume()
			}
		}
		t.Cleanup(resume)
		for _, s := range paused {
			s.Pause()
		}
		return resume
	}
	type call = func(context.Context) error
	// Each case starts with every node up and returns the call to time.
	cases := []struct {
		name  string
		start func(t *testing.T, rs *redlock.Redlock, name string) call
	}{
		{"Do/acquiring", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error {
				err := rs.Do(ctx, name, func(context.Context) error { return nil })
				require.ErrorIs(t, err, mutex.ErrNotObtained)
				return err
			}
		}},
		{"Do/releasing", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error {
				return rs.Do(ctx, name, func(ctx context.Context) error {
					pause(t) // while fn holds the lock; resumed below
					<-ctx.Done()
					return nil // the release's error tells that ctx ended
				})
			}
		}},
		{"Inspect", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error { _, err := rs.Inspect(ctx, name); return err }
		}},
		{"ForceUnlock", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error { _, err := rs.ForceUnlock(ctx, name); return err }
		}},
		{"Check", func(t *testing.T, rs *redlock.Redlock, name string) call {
			return func(ctx context.Context) error { _, err := rs.Check(ctx); return err }
		}},
	}
	for k, c := range cases {
		for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%v", c.name, d), func(t *testing.T) {
				rs := doSet(t, servers)
				t.Cleanup(func() { require.NoError(t, rs.Close()) })
				name := fmt.Sprintf("ctx-%d-%v", k, d)
				call := c.start(t, rs, name)
				if !strings.HasPrefix(c.name, "Do/releasing") {
					pause(t)
				}
				ctx, cancel := context.WithTimeout(t.Context(), d)
				defer cancel()
				start := time.Now()
				err := call(ctx)
				took := time.Since(start)
				require.Less(t, took, d+slack, "returned %v after a ctx of %v (%v)", took, d, err)
				require.ErrorIs(t, err, context.DeadlineExceeded)

				for _, s := range paused {
					s.Resume()
				}
				rs.Settle()
				for i, s := range servers {
					keys, _ := s.Do(t, "KEYS", name+"*").([]any)
					for _, key := range keys {
						assert.True(t, strings.HasSuffix(key.(string), ":quorumlock:rel"), "%s left on node %d", key, i)
					}
				}
			})
		}
	}
}
