package mutex_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Readers share; a writer excludes readers and writers; a refusal because
// the lock is held is not a node failure; nothing is left behind.
func TestRWMutexReadersShareWriterExcludes(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	readers := make([]*mutex.RWMutex, 3)
	for i := range readers {
		readers[i] = b.set(t).NewRWMutex("catalog")
		require.NoError(t, readers[i].RLockContext(t.Context()), "reader %d", i)
		assert.False(t, readers[i].Until().IsZero())
	}
	writer := rs.NewRWMutex("catalog")
	assert.ErrorContains(t, writer.UnlockContext(t.Context()), `"catalog": nothing held`, "named as the caller knows it (review 41)")
	assert.ErrorContains(t, writer.RUnlockContext(t.Context()), `"catalog": nothing held`)
	err := writer.TryLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained, "readers hold it")
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
	for _, r := range readers {
		require.NoError(t, r.RUnlockContext(t.Context()))
	}
	require.NoError(t, writer.TryLockContext(t.Context()))
	err = readers[0].TryRLockContext(t.Context())
	require.ErrorIs(t, err, mutex.ErrNotObtained, "the writer holds it")
	require.ErrorIs(t, rs.NewRWMutex("catalog").TryLockContext(t.Context()), mutex.ErrNotObtained, "a second writer")
	require.NoError(t, writer.UnlockContext(t.Context()))
	require.NoError(t, readers[0].TryRLockContext(t.Context()))
	require.NoError(t, readers[0].RUnlockContext(t.Context()))
	keys, err := b.admin[0].Keys(t.Context(), "catalog*").Result()
	require.NoError(t, err)
	for _, k := range keys { // release tombstones expire on their own, within 2s
		assert.True(t, strings.Contains(k, ":quorumlock:rel:"), "%s left behind", k)
	}
}

// Writers exclude each other and never deadlock, readers or not: 4 writers
// and 4 readers of separate Redlocks, 15 turns each.
func TestRWMutexWritersNeverOverlapOrDeadlock(t *testing.T) {
	b := realBackend(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var writing, reading, overlaps atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		rw := b.set(t).NewRWMutex("ledger")
		wg.Go(func() {
			for range 15 {
				if w%2 == 0 {
					if !assert.NoError(t, rw.LockContext(ctx)) {
						return
					}
					if writing.Add(1) > 1 || reading.Load() > 0 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond) // the work
					writing.Add(-1)
					assert.NoError(t, rw.UnlockContext(ctx))
					continue
				}
				if !assert.NoError(t, rw.RLockContext(ctx)) {
					return
				}
				reading.Add(1)
				if writing.Load() > 0 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				reading.Add(-1)
				assert.NoError(t, rw.RUnlockContext(ctx))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "a writer overlapped another holder")
}

// A writer is not starved by a steady stream of overlapping readers: four
// readers in a loop, each holding 20ms, so that some reader always holds
// the lock; a writer that starts meanwhile obtains it while the stream goes
// on (starved, it would wait until its ctx ends). The wait is logged.
func TestRWMutexWriterIsNotStarvedByReaders(t *testing.T) {
	b := realBackend(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		rw := b.set(t).NewRWMutex("stream")
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if rw.RLockContext(ctx) != nil {
					return
				}
				reads.Add(1)
				time.Sleep(20 * time.Millisecond) // the work, overlapping the others'
				_ = rw.RUnlockContext(ctx)
			}
		})
	}
	require.Eventually(t, func() bool { return reads.Load() >= 8 }, 30*time.Second, time.Millisecond, "the readers' stream")
	writer := b.set(t).NewRWMutex("stream")
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	before := reads.Load()
	start := time.Now()
	require.NoError(t, writer.LockContext(wctx), "the writer was starved")
	waited, during := time.Since(start), reads.Load()-before
	require.NoError(t, writer.UnlockContext(ctx))
	close(stop)
	wg.Wait()
	t.Logf("the writer waited %v behind a stream of readers (%d readers got in meanwhile)", waited, during)
}

// A writer waiting for the readers inside keeps new readers out: they queue
// behind it, first come, first served, and read once it has written.
func TestRWMutexWaitingWriterGoesBeforeLaterReaders(t *testing.T) {
	b := realBackend(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	inside := b.set(t).NewRWMutex("order")
	require.NoError(t, inside.RLockContext(ctx))

	ws := b.set(t)
	writer := ws.NewRWMutex("order")
	var order []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	wrote := make(chan error, 1)
	go func() {
		err := writer.LockContext(ctx)
		note("writer")
		if err == nil {
			err = writer.UnlockContext(ctx)
		}
		wrote <- err
	}()
	require.Eventually(t, func() bool { return ws.Waiting("order") == 1 }, 10*time.Second, time.Millisecond, "the writer waits")

	later := b.set(t).NewRWMutex("order")
	err := later.TryRLockContext(ctx)
	require.ErrorIs(t, err, mutex.ErrNotObtained, "a reader after a waiting writer is refused")
	assert.NotErrorIs(t, err, mutex.ErrNodesUnavailable)
	read := make(chan error, 1)
	go func() {
		err := later.RLockContext(ctx)
		note("reader")
		if err == nil {
			err = later.RUnlockContext(ctx)
		}
		read <- err
	}()
	require.NoError(t, inside.RUnlockContext(ctx))
	require.NoError(t, <-wrote)
	require.NoError(t, <-read)
	assert.Equal(t, []string{"writer", "reader"}, order)
}

// Under partial reachability a writer and a reader whose majorities share a
// node exclude each other there, and readers whose majorities share a node
// read together: 5 nodes, each caller reaching 3 of them.
func TestRWMutexUnderPartialReachability(t *testing.T) {
	b := realBackend(t, 5)
	reaching := func(nodes ...int) *redlock.Redlock {
		return newSet(t, b.reaching(t, nodes...), redlock.WithNodeTimeout(time.Second))
	}
	writer := reaching(0, 1, 2).NewRWMutex("reach", mutex.WithTTL(time.Minute))
	require.NoError(t, writer.TryLockContext(t.Context()))
	reader := reaching(2, 3, 4).NewRWMutex("reach", mutex.WithTTL(time.Minute))
	require.ErrorIs(t, reader.TryRLockContext(t.Context()), mutex.ErrNotObtained, "node 2 refuses the reader")
	require.NoError(t, writer.UnlockContext(t.Context()))

	require.NoError(t, reader.TryRLockContext(t.Context()))
	other := reaching(0, 1, 2).NewRWMutex("reach", mutex.WithTTL(time.Minute))
	require.NoError(t, other.TryRLockContext(t.Context()), "readers share node 2")
	require.ErrorIs(t, reaching(0, 1, 3).NewRWMutex("reach").TryLockContext(t.Context()), mutex.ErrNotObtained, "a writer meets a reader on every majority")
	require.NoError(t, reader.RUnlockContext(t.Context()))
	require.NoError(t, other.RUnlockContext(t.Context()))
}

// Read and write holds are leases like a Mutex's: renewed past their TTL
// with WithAutoExtend, lost when a majority loses the key, and fenced with
// numbers that increase across holders of either kind.
func TestRWMutexLeasesAndFencing(t *testing.T) {
	b := realBackend(t, 3)
	const ttl = 300 * time.Millisecond
	var last uint64
	for _, kind := range []string{"write", "read"} {
		rw := b.set(t).NewRWMutex("lease", mutex.WithTTL(ttl), mutex.WithAutoExtend(), mutex.WithFencing())
		lock := rw.LockContext
		if kind == "read" {
			lock = rw.RLockContext
		}
		require.NoError(t, lock(t.Context()), kind)
		assert.Greater(t, rw.FencingToken(), last, kind)
		last = rw.FencingToken()
		held := time.NewTimer(4 * ttl)
		select {
		case <-rw.Lost():
			t.Fatalf("%s: lost while renewed: %v", kind, rw.LostCause())
		case <-held.C:
		}
		b.del(t, "lease:quorumlock:rw") // as an eviction would
		select {
		case <-rw.Lost():
			require.ErrorIs(t, rw.LostCause(), mutex.ErrNotHeld, kind)
		case <-time.After(10 * ttl):
			t.Fatalf("%s: Lost never closed after the key was lost", kind)
		}
	}
}

// Bad input is ErrInvalid and sends nothing.
func TestRWMutexBadInput(t *testing.T) {
	b := realBackend(t, 1)
	rs := b.set(t)
	for name, rw := range map[string]*mutex.RWMutex{
		"empty name": rs.NewRWMutex(""),
		"bad TTL":    rs.NewRWMutex("bad", mutex.WithTTL(-time.Second)),
		"nil set":    (*redlock.Redlock)(nil).NewRWMutex("bad"),
		"zero":       new(mutex.RWMutex),
		"nil":        nil,
	} {
		require.ErrorIs(t, rw.TryLockContext(t.Context()), mutex.ErrInvalid, name)
		require.ErrorIs(t, rw.RLockContext(t.Context()), mutex.ErrInvalid, name)
		require.ErrorIs(t, rw.RUnlockContext(t.Context()), mutex.ErrInvalid, name)
	}
	require.ErrorIs(t, rs.NewMutex("bad:quorumlock:rw").TryLockContext(t.Context()), mutex.ErrInvalid)
	// An option's error names the read-write lock, not its read hold.
	err := rs.NewRWMutex("bad", mutex.WithTTL(-time.Second)).TryLockContext(t.Context())
	assert.Contains(t, err.Error(), `"bad"`)
	assert.NotContains(t, err.Error(), "(read)")
	keys, err := b.admin[0].Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "nothing written")

	rw := rs.NewRWMutex("mixed")
	require.NoError(t, rw.LockContext(t.Context()))
	require.ErrorIs(t, rw.RUnlockContext(t.Context()), mutex.ErrInvalid, "RUnlock of the write lock")
	require.ErrorIs(t, rw.RLockContext(t.Context()), mutex.ErrAlreadyHeld)
	require.NoError(t, rw.UnlockContext(t.Context()))
	require.ErrorIs(t, rw.UnlockContext(t.Context()), mutex.ErrNotHeld)
	require.NoError(t, rw.RLockContext(t.Context()))
	require.ErrorIs(t, rw.UnlockContext(t.Context()), mutex.ErrInvalid, "Unlock of a read lock")
	require.NoError(t, rw.RUnlockContext(t.Context()))
}

// Lost closes when the lock held, read or write, runs out unextended, as a
// Mutex's does.
func TestRWMutexLostWhenItRunsOut(t *testing.T) {
	b := realBackend(t, 3)
	for _, kind := range []string{"read", "write"} {
		rw := b.set(t).NewRWMutex("expiring-"+kind, mutex.WithTTL(500*time.Millisecond))
		lock, unlock := rw.RLockContext, rw.RUnlockContext
		if kind == "write" {
			lock, unlock = rw.LockContext, rw.UnlockContext
		}
		require.NoError(t, lock(t.Context()))
		until := rw.Until()
		assert.WithinDuration(t, time.Now().Add(500*time.Millisecond), until, 500*time.Millisecond, kind)
		select {
		case <-rw.Lost():
			assert.False(t, time.Now().After(until), "%s: Lost closed after Until", kind)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Lost never closed", kind)
		}
		_ = unlock(t.Context()) // the keys have expired or are about to
	}
}

// A reader queued behind a writer that waits for the readers inside is
// woken when that writer gives up, whether its ctx ends or its last try is
// refused: the readers inside let it read at once. Each caller has a
// Redlock of its own, as separate processes do; the reader's fallback look
// comes after 10s to 20s, so only a message can wake it within 5s.
func TestRWMutexReaderBehindAWriterThatGivesUpIsWoken(t *testing.T) {
	for _, how := range []string{"ctx ends", "last try"} {
		t.Run(how, func(t *testing.T) {
			b := realBackend(t, 3)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			name := "gives-up-" + strings.ReplaceAll(how, " ", "-")
			is := b.set(t)
			inside := is.NewRWMutex(name, mutex.WithTTL(time.Minute))
			require.NoError(t, inside.RLockContext(ctx))
			// Its read lock reaches every node before the writer comes: a
			// late copy finding the writer first in line would tell it,
			// and the writer could give up before the reader subscribed.
			is.NewMutex("settle").Settle()

			ws := b.set(t)
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			wopts := []mutex.Option{mutex.WithRetryDelay(time.Millisecond, 20*time.Second)}
			if how == "last try" {
				// Its second and last try comes after its fallback look, in 2s to 4s.
				wopts = []mutex.Option{mutex.WithTries(2), mutex.WithRetryDelay(time.Millisecond, 4*time.Second)}
			}
			writer := ws.NewRWMutex(name, wopts...)
			wrote := make(chan error, 1)
			go func() { wrote <- writer.LockContext(wctx) }()
			require.Eventually(t, func() bool { return ws.Waiting(name) == 1 }, 10*time.Second, time.Millisecond, "the writer waits")

			rs := b.set(t)
			// Limited tries: the look again that a new subscription
			// brings is not taken, so only the writer's leaving can wake it.
			reader := rs.NewRWMutex(name, mutex.WithTries(100), mutex.WithRetryDelay(time.Millisecond, 20*time.Second))
			read := make(chan error, 1)
			go func() { read <- reader.RLockContext(ctx) }()
			require.Eventually(t, func() bool {
				return rs.Waiting(name) == 1 && pubsubConns(t, b, 0) == 2 && pubsubConns(t, b, 1) == 2 && pubsubConns(t, b, 2) == 2
			}, 10*time.Second, time.Millisecond, "the reader waits behind the writer, subscribed on every node")
			if how == "ctx ends" {
				stop()
			}
			require.ErrorIs(t, <-wrote, mutex.ErrNotObtained)
			requireWoken(t, read, "the reader was not woken when the writer ahead of it gave up")
			require.NoError(t, reader.RUnlockContext(ctx))
			require.NoError(t, inside.RUnlockContext(ctx))
		})
	}
}

// A RWMutex and a Mutex on one name do not exclude each other: their keys
// differ ("<name>:quorumlock:rw", a hash, and "<name>"), so both are
// granted, with no node error, and each releases its own key. A Mutex
// cannot take the RWMutex's key: the name is reserved.
func TestRWMutexAndMutexOnOneNameDoNotExclude(t *testing.T) {
	b := realBackend(t, 3)
	rs := b.set(t)
	rw := rs.NewRWMutex("shared", mutex.WithTTL(time.Minute))
	m := rs.NewMutex("shared", mutex.WithTTL(time.Minute))

	require.NoError(t, rw.LockContext(t.Context()))
	require.NoError(t, m.TryLockContext(t.Context()), "a Mutex on the name is granted beside the write lock")
	m.Settle() // decided at two of three: the third acquire may still be on its way
	assert.Equal(t, 3, b.holders(t, "shared", m.Value()))
	for i, a := range b.admin {
		assert.Equal(t, "hash", a.Type(t.Context(), "shared:quorumlock:rw").Val(), "node %d", i)
	}
	require.NoError(t, m.UnlockContext(t.Context()))
	require.NoError(t, rw.UnlockContext(t.Context()))

	require.NoError(t, m.LockContext(t.Context()))
	require.NoError(t, rw.TryRLockContext(t.Context()), "and a read lock beside the Mutex")
	require.NoError(t, rw.RUnlockContext(t.Context()))
	require.NoError(t, m.UnlockContext(t.Context()))
	m.Settle() // the release's tail on the last node
	assert.Zero(t, b.present(t, "shared"))

	err := rs.NewMutex("shared:quorumlock:rw").TryLockContext(t.Context())
	assert.ErrorIs(t, err, mutex.ErrInvalid)
	assert.ErrorContains(t, err, "reserved")
}
