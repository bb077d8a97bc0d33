package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// A rollback's release queued behind an acquire still out, whose acquire
// then lands, is sent again once the node answers if the release itself
// gets no answer (a connection closed under it): the key does not stay on
// the node for its TTL. Node 0 answers its acquire 100ms late, after the
// two others failed (at 20ms) and decided the round; its release then fails
// unsent. The code that dropped such a release, its acquire not being lost,
// left the key for the whole TTL (TestBadNode/ACL_user_without_EVAL caught it in
// about 1 run of 20).
func TestARollbackReleaseThatGetsNoAnswerIsSentAgain(t *testing.T) {
	s := warmSet(t, 3, 300*time.Millisecond)
	spec := fastSpec("rollback-again")
	late := &failing{name: spec.Name, on: func(call int32) (time.Duration, bool) { return 100 * time.Millisecond, call == 2 }}
	s.Nodes[0].Client().(*redis.Client).AddHook(hook{late.process})
	for _, n := range s.Nodes[1:] {
		other := &failing{name: spec.Name, on: func(int32) (time.Duration, bool) { return 20 * time.Millisecond, true }}
		n.Client().(*redis.Client).AddHook(hook{other.process})
	}
	l := NewContender(s, spec)
	require.Error(t, l.Acquire(t.Context(), 1, nil), "two of three nodes failed")
	admin := redis.NewClient(&redis.Options{Addr: s.Nodes[0].Addr()})
	defer admin.Close()
	require.Eventually(t, func() bool { return late.calls.Load() >= 2 }, 5*time.Second, time.Millisecond, "the release was sent")
	require.Eventually(t, func() bool {
		n, err := admin.Exists(context.Background(), l.key).Result()
		return err == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond, "the acquire that landed late on node 0 was released")
	require.GreaterOrEqual(t, late.calls.Load(), int32(3), "the release was sent again")
}

// failing, for the commands naming name: on, given the call's number (1 for
// the first), says how long to hold its answer back, and whether to fail it
// unsent (after that long), as on a connection closed under it.
type failing struct {
	name  string
	on    func(call int32) (time.Duration, bool)
	calls atomic.Int32
}

var errConnClosed = errors.New("use of closed network connection (injected)")

func (h *failing) process(next func() error, cmds []redis.Cmder) error {
	if !names(cmds, h.name) {
		return next()
	}
	hold, fail := h.on(h.calls.Add(1))
	if fail {
		time.Sleep(hold)
		for _, c := range cmds {
			c.SetErr(errConnClosed)
		}
		return errConnClosed
	}
	err := next()
	time.Sleep(hold)
	return err
}
