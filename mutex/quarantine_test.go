package mutex_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// infoCounter is a go-redis hook that counts INFO commands.
type infoCounter struct{ n atomic.Int32 }

func (c *infoCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *infoCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *infoCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "info" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// quarantined counts the *NodeErrors in err that report a quarantine.
func quarantined(err error) int {
	var merr *multierror.Error
	if !errors.As(err, &merr) {
		return 0
	}
	n := 0
	for _, e := range merr.Errors {
		if errors.Is(e, mutex.ErrQuarantined) {
			n++
		}
	}
	return n
}

// The test's own clock drives the quarantine: a node's start is read from its
// uptime but placed on this clock, so advancing it ages every node.
func quarantineSet(t *testing.T, b *backend, d time.Duration) (*redlock.Redlock, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Now())
	return b.set(t, redlock.WithClock(backoffClock{fake}), redlock.WithRestartQuarantine(d)), fake
}

// ageNodes makes first contact with every node of rs (they are all new, so
// quarantined) and then moves the fake clock past the quarantine.
func ageNodes(t *testing.T, rs *redlock.Redlock, fake *clock.Fake) {
	t.Helper()
	m := rs.NewMutex("first-contact")
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrQuarantined)
	m.Settle()
	fake.Advance(24 * time.Hour)
}

func TestNodesUpLessThanTheQuarantineDoNotCount(t *testing.T) {
	b := realBackend(t, 3)
	rs, fake := quarantineSet(t, b, time.Hour)
	m := rs.NewMutex("fresh")
	err := m.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNodesUnavailable, "every node started seconds ago")
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	assert.GreaterOrEqual(t, quarantined(err), 2, "decided as soon as two were quarantined")
	assert.Contains(t, err.Error(), "it started recently (up ")
	m.Settle()
	assert.Zero(t, b.present(t, "fresh"), "the keys the quarantined nodes granted were released")

	fake.Advance(time.Hour)
	require.NoError(t, m.TryLockContext(t.Context()), "an hour later they count")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A node restarted empty while a lock is held: without the quarantine a
// second owner gets in (the same sequence as TestEmptyRestartCanAdmitSecondOwner
// in internal/safety); with it, the restarted nodes do not count and the
// second owner is refused, although no connection error was ever reported.
func TestQuarantineKeepsRestartedNodesOut(t *testing.T) {
	b := realBackend(t, 3)
	guarded, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, guarded, fake)
	warm := guarded.NewMutex("warm")
	require.NoError(t, warm.TryLockContext(t.Context()), "every node is past its quarantine")
	require.NoError(t, warm.UnlockContext(t.Context()))
	warm.Settle()
	unguarded := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second))

	holder := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second)).NewMutex("restart", mutex.WithTTL(time.Minute))
	b.real[2].Kill()
	require.NoError(t, holder.LockContext(t.Context()), "held on nodes 0 and 1")
	holder.Settle() // its acquire to node 2 has failed for good, not waiting to land after the restart
	b.real[2].RestartEmpty()
	b.real[1].RestartEmpty() // forgets the holder's key

	refused := guarded.NewMutex("restart")
	err := refused.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained, "with the quarantine the second owner is refused")
	refused.Settle() // its rollback releases what the quarantined nodes granted it
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	assert.GreaterOrEqual(t, quarantined(err), 1, "nodes 1 and 2 restarted; the round ends at the first")
	assert.Contains(t, err.Error(), "it restarted or failed over (its run_id changed)")

	second := unguarded.NewMutex("restart")
	require.NoError(t, second.TryLockContext(t.Context()), "without it the second owner gets in")
	assert.True(t, time.Now().Before(holder.Until()), "while the holder's validity runs: two owners")
}

// The uptime is asked on first contact and when a node's marker changed, never
// on every lock; a restart with persistence keeps the marker and is not a
// restart as far as the lock is concerned.
func TestUptimeIsAskedOnlyWhenTheMarkerChanges(t *testing.T) {
	b := realBackend(t, 3)
	counters := make([]*infoCounter, 3)
	for i, c := range b.clients {
		counters[i] = &infoCounter{}
		c.(*redis.Client).AddHook(counters[i])
	}
	rs, fake := quarantineSet(t, b, time.Minute)
	ageNodes(t, rs, fake)
	m := rs.NewMutex("info")
	for range 10 {
		require.NoError(t, m.TryLockContext(t.Context()))
		require.NoError(t, m.UnlockContext(t.Context()))
	}
	m.Settle()
	for i, c := range counters {
		assert.Equal(t, int32(1), c.n.Load(), "node %d: once, on first contact", i)
	}

	b.real[1].RestartEmpty()
	require.NoError(t, m.TryLockContext(t.Context()), "nodes 0 and 2 still make a majority")
	require.NoError(t, m.UnlockContext(t.Context()))
	m.Settle()
	assert.Equal(t, []int32{1, 2, 1}, []int32{counters[0].n.Load(), counters[1].n.Load(), counters[2].n.Load()},
		"only the restarted node was asked again")
}

// SCRIPT FLUSH empties the script cache without losing data: the client
// notices the NOSCRIPT, asks the node, sees the same run_id and marker, and
// goes on counting it.
func TestScriptFlushIsNotARestart(t *testing.T) {
	b := realBackend(t, 3)
	counter := &infoCounter{}
	b.clients[0].(*redis.Client).AddHook(counter)
	rs, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, rs, fake)
	require.NoError(t, b.admin[0].ScriptFlush(t.Context()).Err())
	b.real[2].Kill() // so node 0 is needed for a majority
	m := rs.NewMutex("flush")
	require.NoError(t, m.TryLockContext(t.Context()), "node 0 still counts")
	require.NoError(t, m.UnlockContext(t.Context()))
	assert.Equal(t, int32(2), counter.n.Load(), "asked on first contact, and after the NOSCRIPT")
}

// Any restart, even one that loses nothing (AOF with appendfsync always), is
// quarantined: the client cannot tell how the node persists. Nodes that
// persist every write do not need the quarantine.
func TestAOFRestartIsQuarantinedToo(t *testing.T) {
	b := realBackend(t, 3, redistest.WithAOF())
	rs, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, rs, fake)
	b.real[0].Restart() // kill -9, then reload the AOF
	b.real[2].Kill()    // so node 0 is needed for a majority
	m := rs.NewMutex("aof")
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrQuarantined)
	m.Settle()
	fake.Advance(time.Hour)
	require.NoError(t, m.TryLockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
}

// A node restarted from an older RDB snapshot keeps its marker (the snapshot
// has it) but lost the keys written since. The client notices at its next
// acquisition anyway: the node no longer has this client's own copy of the
// script (NOSCRIPT), its run_id changed, and it is quarantined.
func TestQuarantineCatchesSnapshotRestart(t *testing.T) {
	b := realBackend(t, 3)
	guarded, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, guarded, fake)
	warm := guarded.NewMutex("warm")
	require.NoError(t, warm.TryLockContext(t.Context()))
	require.NoError(t, warm.UnlockContext(t.Context()))
	warm.Settle()
	for _, c := range b.admin {
		require.NoError(t, c.Save(t.Context()).Err()) // the snapshot has the marker, not the lock below
	}

	holder := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second)).NewMutex("snapshot", mutex.WithTTL(time.Minute))
	b.real[2].Kill()
	require.NoError(t, holder.LockContext(t.Context()), "held on nodes 0 and 1")
	b.real[2].RestartKeepingData()
	b.real[1].RestartKeepingData() // back from the snapshot: marker there, the holder's key gone
	require.Empty(t, b.get(t, 1, "snapshot"))
	require.NotEmpty(t, b.get(t, 1, "quorumlock:node"), "the marker survived")

	refused := guarded.NewMutex("snapshot")
	err := refused.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained, "the restarted nodes do not count")
	require.ErrorIs(t, err, mutex.ErrQuarantined)
	refused.Settle()
}

// FLUSHALL loses the data without a restart: the marker changes, and the node
// is quarantined from now, however long it has been up.
func TestQuarantineCatchesFlushAll(t *testing.T) {
	b := realBackend(t, 3)
	guarded, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, guarded, fake)
	m := guarded.NewMutex("flushed")
	require.NoError(t, m.TryLockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
	m.Settle()

	require.NoError(t, b.admin[0].FlushAll(t.Context()).Err())
	b.real[1].Kill() // so node 0 is needed
	err := m.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrQuarantined, "node 0 lost its data an instant ago")
	assert.Contains(t, err.Error(), "it lost its data (its restart marker changed)")
	m.Settle()
	fake.Advance(time.Hour)
	require.NoError(t, m.TryLockContext(t.Context()), "an hour later it counts")
	require.NoError(t, m.UnlockContext(t.Context()))
}

// Nodes restored from a snapshot bring back an old fencing counter. With the
// quarantine on, the client sees them restart and stops trusting their
// counters until a number is written back, so a smaller number is never
// issued: here the counters are far ahead of the clock, so the acquisition is
// refused instead.
func TestSnapshotRestoredCountersDoNotVouch(t *testing.T) {
	b := realBackend(t, 3)
	rs, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, rs, fake)
	ahead := fmt.Sprint(time.Now().Add(100 * 365 * 24 * time.Hour).UnixMicro())
	for _, c := range b.admin {
		require.NoError(t, c.Set(t.Context(), "quorumlock:fence", ahead, 0).Err())
	}
	take := func() (uint64, error) {
		m := rs.NewMutex("fenced", mutex.WithFencing())
		if err := m.TryLockContext(t.Context()); err != nil {
			m.Settle()
			return 0, err
		}
		token := m.FencingToken()
		require.NoError(t, m.UnlockContext(t.Context()))
		m.Settle()
		return token, nil
	}
	first, err := take()
	require.NoError(t, err)
	for _, c := range b.admin {
		require.NoError(t, c.Save(t.Context()).Err())
	}
	last := first
	for range 3 {
		last, err = take()
		require.NoError(t, err)
	}
	for _, s := range b.real {
		s.RestartKeepingData() // every counter is back at the first number
	}
	_, err = take()
	require.ErrorIs(t, err, mutex.ErrQuarantined, "restarted nodes are quarantined first")
	fake.Advance(time.Hour)
	token, err := take()
	if err == nil {
		require.Greater(t, token, last, "a number issued after the restore must still be larger")
	} else {
		require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
		assert.ErrorContains(t, err, "fencing")
	}
}

// After a restart from a snapshot, the only sign of it is one NOSCRIPT. If
// INFO fails then (a timeout, a reset, an ACL), the node must stay out until
// INFO answers: the next acquisition, whose EVALSHA now succeeds, must not
// count it on what was known before the restart.
func TestQuarantineHoldsWhileInfoFails(t *testing.T) {
	b := realBackend(t, 3)
	guarded, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, guarded, fake)
	warm := guarded.NewMutex("warm")
	require.NoError(t, warm.TryLockContext(t.Context()))
	require.NoError(t, warm.UnlockContext(t.Context()))
	warm.Settle()
	for _, c := range b.admin {
		require.NoError(t, c.Save(t.Context()).Err())
	}
	holder := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second)).NewMutex("info-fails", mutex.WithTTL(time.Minute))
	require.NoError(t, holder.LockContext(t.Context()))
	holder.Settle()
	for _, i := range []int{1, 2} {
		b.real[i].RestartKeepingData() // the snapshot: marker there, the holder's key gone
		require.Equal(t, "OK", b.real[i].Do(t, "ACL", "SETUSER", "default", "-info"))
	}

	for attempt := range 3 {
		m := guarded.NewMutex("info-fails")
		err := m.TryLockContext(t.Context())
		require.ErrorIs(t, err, mutex.ErrNotObtained, "attempt %d: the restarted nodes, unchecked, do not count", attempt)
		assert.ErrorContains(t, err, "NOPERM", "attempt %d", attempt)
		m.Settle()
		fake.Advance(2 * time.Second) // past the one second a failed INFO is remembered
	}
	for _, i := range []int{1, 2} {
		require.Equal(t, "OK", b.real[i].Do(t, "ACL", "SETUSER", "default", "+info"))
	}
	m := guarded.NewMutex("info-fails")
	require.ErrorIs(t, m.TryLockContext(t.Context()), mutex.ErrQuarantined, "INFO answers: the restart is seen")
	m.Settle()
	require.ErrorIs(t, holder.UnlockContext(t.Context()), mutex.ErrNotHeld,
		"the restarts lost the holder's keys on a majority: Unlock says so")
}

// Concurrent acquisitions right after a restart from a snapshot: one of them
// sees NOSCRIPT and reloads the script, the others' EVALSHA then succeeds.
// None may count the node before INFO has been read.
func TestConcurrentAcquisitionsAfterARestartAllSeeTheQuarantine(t *testing.T) {
	b := realBackend(t, 3)
	guarded, fake := quarantineSet(t, b, time.Hour)
	ageNodes(t, guarded, fake)
	for round := range 5 {
		warm := guarded.NewMutex("warm")
		require.NoError(t, warm.TryLockContext(t.Context()), "round %d", round)
		require.NoError(t, warm.UnlockContext(t.Context()))
		warm.Settle()
		for _, c := range b.admin {
			require.NoError(t, c.Save(t.Context()).Err())
		}
		b.real[1].RestartKeepingData()
		b.real[2].RestartKeepingData()
		var obtained atomic.Int32
		var wg sync.WaitGroup
		for g := range 40 {
			wg.Go(func() {
				// Staggered starts, so that some EVALSHAs arrive after the
				// script was reloaded and before its INFO was read.
				time.Sleep(time.Duration(g) * 25 * time.Microsecond)
				m := guarded.NewMutex(fmt.Sprintf("race:%d:%d", round, g))
				if m.TryLockContext(t.Context()) == nil {
					obtained.Add(1)
					_ = m.UnlockContext(t.Context())
				}
				m.Settle()
			})
		}
		wg.Wait()
		assert.Zero(t, obtained.Load(), "round %d: locks obtained with two of three nodes just restarted", round)
		fake.Advance(24 * time.Hour) // the quarantine ends before the next round
	}
}

// The restart quarantine guards every primitive as it guards a Mutex: a
// writer held on nodes 0 and 1, and a multi-name lock, survive nodes 1 and 2
// restarting empty; without the quarantine a second owner gets in.
func TestQuarantineGuardsEveryPrimitive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder func(rs *redlock.Redlock) func(context.Context) error
		second func(rs *redlock.Redlock) func(context.Context) error
	}{
		{"rwmutex", func(rs *redlock.Redlock) func(context.Context) error {
			return rs.NewRWMutex("q-rw", mutex.WithTTL(time.Minute)).LockContext
		}, func(rs *redlock.Redlock) func(context.Context) error { return rs.NewRWMutex("q-rw").TryRLockContext }},
		{"multi", func(rs *redlock.Redlock) func(context.Context) error {
			return rs.NewMultiMutex([]string{"q-a", "q-b"}, mutex.WithTTL(time.Minute)).LockContext
		}, func(rs *redlock.Redlock) func(context.Context) error {
			return rs.NewMultiMutex([]string{"q-b", "q-c"}).TryLockContext
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := realBackend(t, 3)
			guarded, fake := quarantineSet(t, b, time.Hour)
			ageNodes(t, guarded, fake)
			unguarded := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second))
			holders := newSet(t, b.clients, redlock.WithNodeTimeout(time.Second))

			b.real[2].Kill()
			require.NoError(t, tc.holder(holders)(t.Context()), "held on nodes 0 and 1")
			holders.NewMutex("settle").Settle() // its acquire to node 2 has failed for good
			b.real[2].RestartEmpty()
			b.real[1].RestartEmpty() // forgets the holder's key

			err := tc.second(guarded)(t.Context())
			require.ErrorIs(t, err, mutex.ErrNotObtained, "with the quarantine the second owner is refused")
			require.ErrorIs(t, err, mutex.ErrQuarantined)
			guarded.NewMutex("settle").Settle() // its rollback has run
			require.NoError(t, tc.second(unguarded)(t.Context()), "without it the second owner gets in")
		})
	}
}
