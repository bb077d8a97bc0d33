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
		assert.True(t, strings.HasSuffix(k, ":quorumlock:rel"), "%s left behind", k)
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
// the lock; a writer that starts meanwhile obtains it within a bound.
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
	start := time.Now()
	require.NoError(t, writer.LockContext(ctx))
	waited := time.Since(start)
	require.NoError(t, writer.UnlockContext(ctx))
	close(stop)
	wg.Wait()
	t.Logf("the writer waited %v behind a stream of readers (%d reads)", waited, reads.Load())
	assert.Less(t, waited, 5*time.Second, "the writer was starved")
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
	require.ErrorIs(t, rs.NewMutex("bad:quorumlock:rw:gate").TryLockContext(t.Context()), mutex.ErrInvalid)
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
// Mutex's does; Until is the earliest of its parts'.
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
